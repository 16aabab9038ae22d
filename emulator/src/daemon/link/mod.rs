//! How a device reaches the network: the RoCE datagram links (kernel UDP, AF_PACKET,
//! AF_XDP) and what wraps them (packet capture, fault injection), the backend names, and
//! the pause frames a raw link hears. The iWARP stream side (kernel TCP, smoltcp) is
//! `siw/net.rs`'s `StreamNet`.

pub mod backend;
pub mod capture;
pub mod datagram;
pub mod fault;
pub mod faulty;
pub mod local;
pub mod mmsg;
pub mod packet;
pub mod pause;
pub mod stack;
pub mod udp;
pub mod vnet;
pub mod xdp;
