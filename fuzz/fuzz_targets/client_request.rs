//! What a client process can send the daemon: a control request datagram, and the WQE
//! slots it writes into its SQ/RQ/SRQ rings. Decoding never panics; a decoded request
//! re-encodes to bytes that decode to the same request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::client::slot::{RecvWqe, RecvWqeRepr, SendWqe, SendWqeRepr};
use wire::client::Request;

fuzz_target!(|data: &[u8]| {
    // Byte 0 picks what the rest is, as a hostile client controls every byte of each.
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 3 {
        0 => {
            let _ = Request::decode_seq(rest);
            if let Ok(request) = Request::decode(rest) {
                let again = request.encode().expect("a decoded request re-encodes");
                assert_eq!(Request::decode(&again).expect("re-encoded request decodes"), request);
            }
        }
        1 => {
            if let Ok(wqe) = SendWqe::new_checked(rest) {
                let _ = SendWqeRepr::parse(&wqe);
            }
        }
        _ => {
            if let Ok(wqe) = RecvWqe::new_checked(rest) {
                let _ = RecvWqeRepr::parse(&wqe);
            }
        }
    }
});
