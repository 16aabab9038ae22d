//! iWARP: MPA, DDP, RDMAP. (Filled by the wire work.)
