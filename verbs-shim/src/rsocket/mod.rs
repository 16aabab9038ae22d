//! librdmacm's rsockets (`<rdma/rsocket.h>`): stream sockets over RC QPs, speaking
//! rdma-core's rsocket protocol so either end may be rdma-core's own librdmacm, and so
//! Debian's unmodified `librspreload.so` carries TCP programs over rdma-emu.
//!
//! - [`proto`]: the wire layout (connection private data, 32-bit messages, SGEs);
//! - [`recv`]: the receive-side bookkeeping a hostile peer is checked against;
//! - [`stream`]: a connected socket's data path (credits, RDMA WRITE WITH IMMEDIATE or,
//!   on iWARP, WRITE + inline SEND);
//! - [`iomap`]: the `riomap`/`riowrite` mappings;
//! - [`ep`]: the verbs underneath (the shim's own functions, no daemon request of its own);
//! - [`sock`]: socket states (bind, listen, accept, connect, shutdown, options);
//! - [`opts`]: socket options;
//! - [`keepalive`]: `SO_KEEPALIVE`'s periodic control message;
//! - [`poll`]: `rpoll`/`rselect` over rsockets and ordinary descriptors;
//! - [`table`]: the process's rsockets by descriptor;
//! - [`dgram`], [`dhdr`], [`dapi`]: datagram rsockets (`SOCK_DGRAM`) over UD QPs, their
//!   two headers, and the calls on them;
//! - [`api`]: the exported C functions.
//!
//! An rsocket's number is a real descriptor, as in rdma-core: for a stream the event
//! channel of its RDMA CM id, for a datagram socket a kernel UDP socket.
pub mod api;
pub mod dapi;
pub mod dgram;
pub mod dhdr;
pub mod ep;
pub mod iomap;
pub mod keepalive;
pub mod opts;
pub mod poll;
pub mod proto;
pub mod recv;
pub mod sock;
pub mod stream;
pub mod table;
