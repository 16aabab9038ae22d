//! CM MADs (the payload of a UD SEND to QP1): nothing panics, a parsed MAD re-emits to
//! the same bytes' meaning, and the RDMA CM header inside a REQ parses or errs cleanly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::cm::{CmMad, CmMessage, CmaHeader};

fuzz_target!(|data: &[u8]| {
    let Ok(mad) = CmMad::parse(data) else {
        return;
    };
    if let CmMessage::Req(r) = mad.message {
        let _ = CmaHeader::parse(r.private_data);
    }
    let mut again = vec![0u8; mad.buffer_len()];
    mad.emit(&mut again);
    assert_eq!(CmMad::parse(&again).expect("re-emitted MAD parses"), mad);
});
