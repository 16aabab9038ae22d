//! `rdma-emu`: run programs on the emulated devices, manage devices, read counters. The
//! commands are `emulator::cli`'s.

fn main() -> std::process::ExitCode {
    emulator::cli::main()
}
