//! What can go wrong in an exporter, typed.
//!
//! In: the failures of a destination's setup (a CA file, a header, an
//! address to listen on) and of a send (an HTTP status, a gRPC code, an I/O
//! error). Out: [`ExportError`] for setup, one line each; [`SendError`],
//! which says whether sending the same window again may succeed
//! ([`SendError::Transient`]: the delivery loop retries it with backoff) or
//! cannot ([`SendError::Permanent`]: the loop drops the window and counts it,
//! rather than retry it forever and hold up every window behind it).

use std::net::SocketAddr;
use std::path::PathBuf;

/// The most of an error answer's body read, whatever its `Content-Length`
/// says (a server, or a user bound to its port, answering 429 with a
/// 1-GiB body once took the agent to 2.14 GB).
pub const MAX_ANSWER_READ: u64 = 4 << 10;
/// The most of a destination's text (a body, a gRPC status message) put in
/// a message, in characters.
pub const MAX_ANSWER_CHARS: usize = 200;

/// What a destination said, for a message: its first
/// [`MAX_ANSWER_CHARS`] characters, trimmed, with controls escaped (it is
/// whatever the other end chose to send).
pub fn answer_text(text: &str) -> String {
    let cut: String = text.trim().chars().take(MAX_ANSWER_CHARS).collect();
    let more = if text.trim().chars().nth(MAX_ANSWER_CHARS).is_some() {
        "..."
    } else {
        ""
    };
    format!("{}{more}", crate::escape::escape(&cut))
}

/// Why an exporter could not be set up (each a line the agent prints).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The pprof directory was refused or could not be made.
    #[error("{0}; give another with --pprof-dir")]
    PprofDir(#[from] crate::store::DirError),
    /// The OTLP CA file could not be read.
    #[error("cannot read the OTLP CA file {}: {source}", path.display())]
    ReadCa {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An `--otlp-header` name that gRPC metadata cannot carry.
    #[error("otlp-header {0:?}: not a valid gRPC metadata key")]
    HeaderKey(String),
    /// An `--otlp-header` value that is not printable ASCII.
    #[error("otlp-header {0}: the value is not printable ASCII")]
    HeaderValue(String),
    /// The OTLP exporter's event loop could not start.
    #[error("cannot start the OTLP exporter's event loop: {0}")]
    OtlpRuntime(std::io::Error),
    /// reqwest could not make a client (TLS backend).
    #[error("cannot make an HTTP client: {0}")]
    HttpClient(reqwest::Error),
    /// `--metrics`' event loop could not start.
    #[error("cannot start the --metrics event loop: {0}")]
    MetricsRuntime(std::io::Error),
    /// `--metrics`' address cannot be listened on.
    #[error("cannot listen on {addr} for --metrics: {source}; choose another address")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// `--metrics`' thread could not start.
    #[error("cannot start the --metrics thread: {0}")]
    MetricsThread(std::io::Error),
}

/// Why a window was not delivered, and whether sending it again may help.
/// The line says what happened; the delivery loop adds what it does next.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// May succeed later: the connection was refused or reset, the
    /// destination did not answer in time, or answered 408, 429 or 5xx (it
    /// is down, overloaded or restarting), or 401/403 (its credentials are
    /// being fixed), or a local write failed (a full disk frees up).
    #[error("{0}")]
    Transient(String),
    /// Will fail the same way however often it is sent: the destination
    /// answered another 4xx or the gRPC equivalent, or
    /// rejected what it got, or the window could not be encoded.
    #[error("{0}")]
    Permanent(String),
}

impl SendError {
    /// True when sending again may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, SendError::Transient(_))
    }

    /// `message` for an HTTP answer with `status` (not a success).
    pub fn http(status: u16, message: String) -> SendError {
        // 408 Request Timeout and 429 Too Many Requests are the 4xx that
        // say "later"; every 5xx is the server's trouble, not the request's.
        // 401 and 403 are the credentials, which an operator fixes: the
        // windows wait in the store (within the backlog) rather than being
        // dropped while a token is renewed.
        if matches!(status, 401 | 403 | 408 | 429) || !(400..500).contains(&status) {
            SendError::Transient(message)
        } else {
            SendError::Permanent(message)
        }
    }

    /// `message` for a gRPC status `code` (not OK), as [`SendError::http`]
    /// does: what the request itself got wrong is permanent. (OTLP's spec
    /// also gives up on INTERNAL and UNKNOWN; they are what a proxy's 5xx
    /// becomes, so they are retried here, as the 5xx are.)
    pub fn grpc(code: tonic::Code, message: String) -> SendError {
        use tonic::Code::*;
        match code {
            // Credentials (UNAUTHENTICATED, PERMISSION_DENIED) wait, as 401/403 do.
            InvalidArgument | NotFound | AlreadyExists | FailedPrecondition | Unimplemented => {
                SendError::Permanent(message)
            }
            // Unavailable, DeadlineExceeded, ResourceExhausted (429's twin),
            // Aborted, Cancelled, Internal, Unknown, DataLoss, OutOfRange.
            _ => SendError::Transient(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that only what the request itself got wrong is permanent:
    /// HTTP 400, 404, 413, 422 and their gRPC kin; and that throttling
    /// (429, RESOURCE_EXHAUSTED), timeouts (408, DEADLINE_EXCEEDED), server
    /// trouble (500, 502, 503, 504, UNAVAILABLE, INTERNAL) and credentials
    /// (401, 403, UNAUTHENTICATED, PERMISSION_DENIED) are retried.
    #[test]
    fn only_what_the_request_got_wrong_is_permanent() {
        for status in [400, 404, 413, 415, 422] {
            assert!(
                !SendError::http(status, String::new()).is_transient(),
                "HTTP {status}"
            );
        }
        for status in [401, 403, 408, 429, 500, 502, 503, 504, 599] {
            assert!(
                SendError::http(status, String::new()).is_transient(),
                "HTTP {status}"
            );
        }
        use tonic::Code;
        for code in [Code::InvalidArgument, Code::Unimplemented, Code::NotFound] {
            assert!(
                !SendError::grpc(code, String::new()).is_transient(),
                "{code:?}"
            );
        }
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
            Code::Internal,
            Code::Aborted,
            Code::Unknown,
            Code::Unauthenticated,
            Code::PermissionDenied,
        ] {
            assert!(
                SendError::grpc(code, String::new()).is_transient(),
                "{code:?}"
            );
        }
        // The line is the message, whichever kind.
        assert_eq!(
            SendError::http(503, "x answered 503".into()).to_string(),
            "x answered 503"
        );
    }
}
