//! `rdma-emu decode`: one line per frame of a pcap/pcapng file, ICRC and CRC checked.
