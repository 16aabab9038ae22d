//! `rdma-emu`: run programs on the emulated devices, manage devices, read counters. The
//! commands are `emulator::cli`'s.

fn main() -> std::process::ExitCode {
    // In the device view this executable also stands in for iproute2's `rdma`.
    let mut args = std::env::args();
    let called = args.next().unwrap_or_default();
    if std::path::Path::new(&called).file_name() == Some(std::ffi::OsStr::new("rdma")) {
        return emulator::devview::rdma_tool::main(&args.collect::<Vec<_>>());
    }
    emulator::cli::main()
}
