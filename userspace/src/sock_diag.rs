//! Who owns one TCP socket, asked of the kernel with `NETLINK_SOCK_DIAG`.
//!
//! In: a TCP connection's two ends, as one side of it sees them. Out: the
//! uid that created the socket on the other side of that connection, which
//! the kernel records (`sk_uid`) and no user can forge; or that there is no
//! such socket. `sysprof view` asks this for every connection it accepts.
//!
//! Why not `/proc/net/tcp`: that is every TCP socket of the machine, read
//! and parsed per question, so a user who opens many connections makes each
//! question slower for everyone (a flood made view spend 13.7 s of CPU in
//! 25 s and the owner's download take seconds). An `inet_diag_req_v2` with
//! the exact 4-tuple and no dump flag is one hash lookup in the kernel
//! (`inet_diag_find_one_icsk`): one request, one reply, whatever the number
//! of sockets. The structures (`linux/inet_diag.h`) are written and read as
//! bytes here rather than declared `repr(C)`: no unsafe beyond the socket.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{FromRawFd, OwnedFd};

/// `SOCK_DIAG_BY_FAMILY` (`linux/sock_diag.h`): the request and reply type.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLMSG_ERROR` (`linux/netlink.h`).
const NLMSG_ERROR: u16 = 2;
/// `NLM_F_REQUEST`; without `NLM_F_DUMP` the kernel looks up one socket.
const NLM_F_REQUEST: u16 = 1;
/// `INET_DIAG_NOCOOKIE`: match the socket by its addresses alone.
const NO_COOKIE: u32 = !0;
/// `struct nlmsghdr`'s size.
const NLMSG_HDR: usize = 16;
/// `struct inet_diag_sockid`'s size: ports, two 16-byte addresses, the
/// interface, the cookie.
const SOCKID: usize = 2 + 2 + 16 + 16 + 4 + 8;
/// `struct inet_diag_req_v2`'s size: family, protocol, ext, pad, states, id.
const REQ: usize = 4 + 4 + SOCKID;
/// Where `idiag_uid` is in `struct inet_diag_msg`: after family, state,
/// timer, retrans, the id, expires, rqueue and wqueue.
const MSG_UID: usize = 4 + SOCKID + 12;

/// The uid owning the TCP socket whose own end is `local` and whose peer is
/// `remote` (for a connection we accepted: `local` is the client's address
/// as we see it as the peer, `remote` our own address). `Ok(None)` when the
/// kernel knows no such socket (closed since); an error when it cannot be
/// asked (a kernel without `tcp_diag`, a netlink failure).
pub fn tcp_socket_uid(local: SocketAddr, remote: SocketAddr) -> std::io::Result<Option<u32>> {
    let family = match (local.ip(), remote.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => libc::AF_INET,
        (IpAddr::V6(_), IpAddr::V6(_)) => libc::AF_INET6,
        _ => return Ok(None),
    };
    // SAFETY: socket() takes no pointers.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nothing else owns: the OwnedFd
    // closes it exactly once.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // An unconnected netlink socket sends to the kernel (port 0), which
    // answers within the send, so the read does not wait.
    let mut netlink = std::fs::File::from(owned);
    netlink.write_all(&request(family as u8, local, remote))?;
    // One inet_diag_msg (72 bytes) and its attributes (none asked), or an
    // nlmsgerr (20 bytes and the request echoed).
    let mut reply = [0u8; 512];
    let n = netlink.read(&mut reply)?;
    parse_reply(&reply[..n], local, remote)
}

/// The bytes of an `nlmsghdr` and `inet_diag_req_v2` asking for the TCP
/// socket from `local` to `remote`.
fn request(family: u8, local: SocketAddr, remote: SocketAddr) -> Vec<u8> {
    let mut b = Vec::with_capacity(NLMSG_HDR + REQ);
    b.extend(((NLMSG_HDR + REQ) as u32).to_ne_bytes());
    b.extend(SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b.extend(NLM_F_REQUEST.to_ne_bytes());
    b.extend(1u32.to_ne_bytes()); // sequence number
    b.extend(0u32.to_ne_bytes()); // port id: the kernel fills it in
    b.extend([family, libc::IPPROTO_TCP as u8, 0, 0]);
    b.extend(u32::MAX.to_ne_bytes()); // every state
    b.extend(sockid(local, remote));
    b
}

/// `struct inet_diag_sockid` for `src` → `dst`: ports and addresses in
/// network order, IPv4 addresses in the first 4 bytes of their 16.
fn sockid(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let address = |a: &SocketAddr| match a.ip() {
        IpAddr::V4(ip) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&ip.octets());
            b
        }
        IpAddr::V6(ip) => ip.octets(),
    };
    let mut b = Vec::with_capacity(SOCKID);
    b.extend(src.port().to_be_bytes());
    b.extend(dst.port().to_be_bytes());
    b.extend(address(&src));
    b.extend(address(&dst));
    b.extend(0u32.to_ne_bytes()); // any interface
    b.extend(NO_COOKIE.to_ne_bytes());
    b.extend(NO_COOKIE.to_ne_bytes());
    b
}

/// The uid in the kernel's `reply`, checked to describe the socket asked
/// for; `Ok(None)` for "no such socket", an error for any other error.
fn parse_reply(
    reply: &[u8],
    local: SocketAddr,
    remote: SocketAddr,
) -> std::io::Result<Option<u32>> {
    let bad = |why: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("sock_diag answered {why}"),
        )
    };
    let u32_at = |at: usize| {
        reply
            .get(at..at + 4)
            .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
    };
    let kind = reply
        .get(4..6)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .ok_or_else(|| bad("less than a message header"))?;
    let len = u32_at(0).ok_or_else(|| bad("less than a message header"))? as usize;
    let payload = reply
        .get(NLMSG_HDR..len.min(reply.len()))
        .ok_or_else(|| bad("a message shorter than its header"))?;
    match kind {
        NLMSG_ERROR => {
            // struct nlmsgerr: a negative errno first.
            let errno = payload
                .get(..4)
                .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
                .ok_or_else(|| bad("a short error"))?;
            match -errno {
                libc::ENOENT => Ok(None),
                e => Err(std::io::Error::from_raw_os_error(e)),
            }
        }
        SOCK_DIAG_BY_FAMILY => {
            // The reply names the socket found: it must be the one asked for.
            let id = payload
                .get(4..4 + SOCKID)
                .ok_or_else(|| bad("a short socket"))?;
            if id[..36] != sockid(local, remote)[..36] {
                return Err(bad("another socket than the one asked for"));
            }
            let uid = payload
                .get(MSG_UID..MSG_UID + 4)
                .ok_or_else(|| bad("a short socket"))?;
            Ok(Some(u32::from_ne_bytes(uid.try_into().expect("4 bytes"))))
        }
        other => Err(bad(&format!("message type {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that both ends of a loopback connection are found, each with
    /// our uid (as `/proc/net/tcp`'s row for it says), that the reversed
    /// pair finds the other end, and that a port nobody uses finds nothing.
    #[test]
    fn both_ends_of_a_connection_are_ours() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        let server_addr = listener.local_addr().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        // The kernel's other word for it: the uid column of /proc/net/tcp.
        let hex = |a: SocketAddr| match a {
            SocketAddr::V4(a) => format!(
                "{:08X}:{:04X}",
                u32::from_ne_bytes(a.ip().octets()),
                a.port()
            ),
            SocketAddr::V6(_) => unreachable!(),
        };
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
        let row_uid = table
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| {
                f.get(1) == Some(&hex(peer).as_str())
                    && f.get(2) == Some(&hex(server_addr).as_str())
            })
            .and_then(|f| f[7].parse::<u32>().ok())
            .expect("the client's row in /proc/net/tcp");
        // SAFETY: geteuid cannot fail.
        assert_eq!(row_uid, unsafe { libc::geteuid() });
        assert_eq!(
            tcp_socket_uid(peer, server_addr).unwrap(),
            Some(row_uid),
            "the client's socket"
        );
        assert_eq!(
            tcp_socket_uid(server_addr, peer).unwrap(),
            Some(row_uid),
            "the accepted socket"
        );
        // A port nothing holds: one the kernel just gave and took back (a
        // fixed port may have a listener of anybody's on it).
        let elsewhere = std::net::TcpListener::bind(SocketAddr::new(peer.ip(), 0))
            .unwrap()
            .local_addr()
            .unwrap();
        assert_eq!(
            tcp_socket_uid(elsewhere, server_addr).unwrap(),
            None,
            "no socket there"
        );
    }

    /// Check that an IPv6 loopback connection is found too.
    #[test]
    fn ipv6_connections_are_found() {
        let Ok(listener) = std::net::TcpListener::bind("[::1]:0") else {
            return;
        };
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, _) = listener.accept().unwrap();
        // SAFETY: geteuid cannot fail.
        let us = unsafe { libc::geteuid() };
        assert_eq!(
            tcp_socket_uid(client.local_addr().unwrap(), listener.local_addr().unwrap()).unwrap(),
            Some(us)
        );
    }

    /// Check that a reply describing another socket than the one asked for
    /// is an error, not an answer.
    #[test]
    fn a_reply_for_another_socket_is_refused() {
        let a: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:8000".parse().unwrap();
        let mut reply = vec![0u8; NLMSG_HDR + MSG_UID + 8];
        let len = reply.len() as u32;
        reply[..4].copy_from_slice(&len.to_ne_bytes());
        reply[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        reply[NLMSG_HDR + 4..NLMSG_HDR + 4 + SOCKID].copy_from_slice(&sockid(a, b));
        reply[NLMSG_HDR + MSG_UID..NLMSG_HDR + MSG_UID + 4].copy_from_slice(&1000u32.to_ne_bytes());
        assert_eq!(parse_reply(&reply, a, b).unwrap(), Some(1000));
        assert!(parse_reply(&reply, b, a).is_err());
        assert!(parse_reply(&reply[..10], a, b).is_err());
    }
}
