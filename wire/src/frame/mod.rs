//! Whole frames: Ethernet / IP / UDP / TCP around RoCE and iWARP. (Filled by the wire work.)
