//! A scripted daemon for trying programs against the shim without rdma-emud:
//! `cargo run -p verbs-shim --example mock_daemon -- /tmp/mock.sock`, then
//! `RDMA_EMU_SOCKET=/tmp/mock.sock LD_LIBRARY_PATH=.../rdma-emu-lib ibv_devinfo -v`.
//! It answers control requests with fixed values and executes no work requests.
#[path = "../tests/mock/mod.rs"]
mod mock;

use std::sync::{Arc, Mutex};

fn main() {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: mock_daemon SOCKET");
        std::process::exit(2);
    };
    let path = std::path::PathBuf::from(path);
    let _ = std::fs::remove_file(&path);
    let listener = mock::listen(&path);
    loop {
        let conn = mock::accept(&listener);
        std::thread::spawn(move || mock::serve(conn, Arc::new(Mutex::new(mock::Rings::default()))));
    }
}
