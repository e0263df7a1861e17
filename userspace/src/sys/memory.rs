//! Reading another process's memory: `process_vm_readv`, which neither
//! stops the process nor attaches to it (the kernel checks the same access
//! as ptrace's read mode, which root has). In: a pid and an address. Out:
//! the bytes, or the error (the process gone, the page not mapped).

/// Fill `buf` from `pid`'s memory at `addr`: Ok only when every byte was read.
pub fn read_process(pid: u32, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one local iovec over `buf`, which we own mutably; the remote
    // one is only an address for the kernel to check.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if n as usize != buf.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "a partial read",
        ));
    }
    Ok(())
}
