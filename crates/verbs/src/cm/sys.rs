//! The libc side of the RDMA CM: socket addresses to and from `sockaddr_storage`, the event
//! channel's file descriptor (non-blocking, waited on with `poll`), a CM device's name, and
//! the error of a failed call.

use std::ffi::CStr;
use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::raw::c_int;
use std::ptr;

use rdma_mummy_sys::{ibv_context, ibv_get_device_name};

use crate::error::VerbsError;

pub(super) fn to_sockaddr(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain data; zero is valid.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                // As std's own conversion: the flow information is passed through as is.
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
        }
    }
    storage
}

pub(super) fn from_sockaddr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    let p: *const libc::sockaddr_storage = storage;
    match c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in; it is large and aligned.
            let sin = unsafe { &*p.cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6; it is large and aligned.
            let sin6 = unsafe { &*p.cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The name of the device behind a verbs context, none for a null context.
///
/// # Safety
/// `ctx` is null or a live `ibv_context`.
pub(super) unsafe fn context_device_name(ctx: *mut ibv_context) -> Option<String> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: a live context has a live device, whose name is a NUL-terminated string it owns.
    unsafe {
        let device = (*ctx).device;
        if device.is_null() {
            return None;
        }
        let name = ibv_get_device_name(device);
        (!name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned())
    }
}

pub(super) fn set_nonblocking(fd: c_int) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor this process owns; no pointers.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits up to `timeout_ms` for `fd` to be readable; an interrupted wait just returns.
pub(super) fn wait_readable(fd: c_int, timeout_ms: c_int) -> io::Result<()> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on the stack.
    if unsafe { libc::poll(&mut pfd, 1, timeout_ms) } < 0 {
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    Ok(())
}

pub(super) fn last_error(call: &'static str) -> VerbsError {
    VerbsError::Call {
        call,
        reason: io::Error::last_os_error(),
    }
}
