//! Drop-in libibverbs.so.1 and librdmacm.so.1 for rdma-emu.
