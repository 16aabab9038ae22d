//! The sans-IO device model and InfiniBand transport (RC, UC, UD) of rdma-emu.
