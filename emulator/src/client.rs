//! A blocking client of the control protocol, for the `rdma-emu` tool and the tests.

use crate::daemon::sys;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use wire::client::{Reply, ReplyBody, Request, RequestBody, MAX_MESSAGE_LEN, PROTOCOL_VERSION};

/// One session with the daemon.
#[derive(Debug)]
pub struct Client {
    sock: OwnedFd,
    seq: u64,
}

/// A call failed: the transport, or the daemon answered with an errno.
#[derive(Debug)]
pub enum CallError {
    Io(io::Error),
    /// The daemon's reply was not a valid message or had the wrong `seq`.
    Protocol(String),
    Errno(i32),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Io(e) => write!(f, "{e}"),
            CallError::Protocol(s) => write!(f, "protocol error: {s}"),
            CallError::Errno(e) => f.write_str(&errno_text(*e)),
        }
    }
}

/// What to tell a person about an errno from the daemon: the system's text, and for
/// EACCES, which the daemon answers only to a privileged request from a client that is
/// not an administrator (`daemon/sessions/users.rs`), who may make it.
pub fn errno_text(errno: i32) -> String {
    let text = io::Error::from_raw_os_error(errno).to_string();
    if errno == libc::EACCES {
        format!(
            "{text}: a privileged command; rdma-emud allows it to root, to its own user and \
             to the members of its admin group (--admin-group, admin_group)"
        )
    } else {
        text
    }
}
impl std::error::Error for CallError {}

impl From<io::Error> for CallError {
    fn from(e: io::Error) -> Self {
        CallError::Io(e)
    }
}

impl Client {
    /// Connects and says `Hello`.
    pub fn connect(path: &Path) -> Result<(Client, ReplyBody), CallError> {
        let sock = sys::seqpacket_connect(path)?;
        let mut c = Client { sock, seq: 0 };
        let (hello, _) = c.call(
            RequestBody::Hello {
                version: PROTOCOL_VERSION,
                pid: std::process::id(),
            },
            &[],
        )?;
        Ok((c, hello))
    }

    /// The raw socket (tests send garbage through it).
    pub fn socket(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Sends one request with `fds` and waits for its reply and any descriptors.
    pub fn call(
        &mut self,
        body: RequestBody,
        fds: &[RawFd],
    ) -> Result<(ReplyBody, Vec<OwnedFd>), CallError> {
        self.seq += 1;
        let bytes = Request {
            seq: self.seq,
            body,
        }
        .encode()
        .map_err(|e| CallError::Protocol(e.to_string()))?;
        sys::send_msg(self.sock.as_raw_fd(), &bytes, fds)?;
        let (reply, fds) = self.recv()?;
        if reply.seq != self.seq {
            return Err(CallError::Protocol(format!(
                "reply seq {} for request {}",
                reply.seq, self.seq
            )));
        }
        match reply.result {
            Ok(body) => Ok((body, fds)),
            Err(errno) => Err(CallError::Errno(errno)),
        }
    }

    /// Receives one reply.
    pub fn recv(&mut self) -> Result<(Reply, Vec<OwnedFd>), CallError> {
        let mut buf = vec![0u8; MAX_MESSAGE_LEN];
        loop {
            let got = sys::recv_msg(self.sock.as_raw_fd(), &mut buf)?;
            let Some(got) = got else { continue };
            if got.len == 0 && got.fds.is_empty() {
                return Err(CallError::Io(io::Error::from(io::ErrorKind::UnexpectedEof)));
            }
            let reply =
                Reply::decode(&buf[..got.len]).map_err(|e| CallError::Protocol(e.to_string()))?;
            return Ok((reply, got.fds));
        }
    }

    /// Sends raw bytes as one datagram (tests of hostile input).
    pub fn send_raw(&self, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
        sys::send_msg(self.sock.as_raw_fd(), bytes, fds)
    }
}
