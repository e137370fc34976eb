//! Connecting RC queue pairs through the RDMA connection manager (librdmacm), perftest's `-R`.
//!
//! rdmabench keeps its own QPs (built by [`QueuePairBuilder`](crate::QueuePairBuilder), already
//! in INIT) and uses the RDMA CM only to resolve the address and the route, to exchange the
//! connection request and reply (which carry the QP numbers), and to compute the RTR and RTS
//! attributes (`rdma_init_qp_attr`). The CM never owns or modifies the QP: no
//! `rdma_create_qp`, so librdmacm leaves `id->qp` empty and the transitions are ours.
//!
//! - Passive side: [`CmListener::bind`], then [`CmListener::accept_qp`] once per QP. A request
//!   whose QP number is not the one expected is kept for a later `accept_qp` (requests may
//!   arrive in any order); the ones never asked for are rejected when the listener is dropped.
//! - Active side: [`cm_connect`] once per QP, from the local RoCE/IPoIB address.
//!
//! Each returns the QP ready to send and a [`CmConnection`] to keep for the whole run: dropping
//! it disconnects. Every wait on the CM's events ends at the caller's deadline.
//!
//! RC only: the RDMA CM's TCP port space (`RDMA_PS_TCP`) connects reliable-connection QPs. UC
//! and UD QPs are refused with [`VerbsError::InvalidRequest`]; the caller connects those
//! through its own control channel.
//!
//! What the CM decides and what rdmabench overrides (from [`PathConfig`]):
//! - RTR: path MTU is the smaller of the CM's and `PathConfig::mtu`; `max_dest_rd_atomic`
//!   from `PathConfig`; `min_rnr_timer` 12 (the kernel gives 0); the GRH traffic class and
//!   the service level from `PathConfig` where they are not 0 (0 keeps the CM's, e.g. the
//!   kernel's `default_roce_tos`). The destination, its GID, the source GID index and the
//!   PSNs are the CM's.
//! - RTS: `timeout` and `retry_count` from `PathConfig` (the connection parameters carry the
//!   retry count too), RNR retry 7, `max_rd_atomic` from `PathConfig`.
//!
//! On the active side a non-zero traffic class is also given to the CM
//! (`RDMA_OPTION_ID_TOS`, as perftest does), so that the route it resolves and the path the
//! passive side receives carry it too. An address resolution is asked again every 2 s until
//! the deadline: in the soft-RoCE guest a first request can wait for its own timeout on a
//! neighbour that a new request finds resolved.
//!
//! librdmacm is called directly through rdma-mummy-sys: sideway 0.4.3's wrapper carries no QP
//! number in its connection parameters, no `rdma_set_option` or `rdma_reject`, and panics on
//! event types it does not know. The libc side (socket addresses, the event channel's
//! descriptor) is `cm/sys.rs`; the tests are `cm/tests.rs`.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::mem;
use std::net::{IpAddr, SocketAddr};
use std::os::raw::{c_int, c_void};
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_mummy_sys::{
    ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_state, rdma_accept, rdma_ack_cm_event, rdma_bind_addr,
    rdma_cm_event, rdma_cm_event_type as ev, rdma_cm_id, rdma_conn_param, rdma_connect,
    rdma_create_event_channel, rdma_create_id, rdma_destroy_event_channel, rdma_destroy_id,
    rdma_disconnect, rdma_establish, rdma_event_channel, rdma_get_cm_event, rdma_init_qp_attr,
    rdma_listen, rdma_port_space, rdma_reject, rdma_resolve_addr, rdma_resolve_route,
    rdma_set_option,
};
use sideway::ibverbs::queue_pair::QueuePairAttribute;

use crate::device::mtu_from_bytes;
use crate::error::{Result, VerbsError};
use crate::qp::{Created, PathConfig, QueuePair, ReadyToSend, Transport};

mod sys;
use sys::{
    context_device_name, from_sockaddr, last_error, set_nonblocking, to_sockaddr, wait_readable,
};

/// How many connection requests a listener queues in the kernel before it accepts them.
const LISTEN_BACKLOG: c_int = 128;

/// How many requests for QPs not yet asked for a listener keeps; beyond, it rejects them.
const MAX_PENDING: usize = 1024;

/// `rdma_set_option` level and option for the IP type of service (`<rdma/rdma_cma.h>`'s
/// anonymous enums, which the bindings do not carry).
const RDMA_OPTION_ID: c_int = 0;
const RDMA_OPTION_ID_TOS: c_int = 0;

/// The RNR NAK timer rdmabench's RC QPs advertise (0.96 ms), as in `ready_to_receive`.
const MIN_RNR_TIMER: u8 = 12;

/// `ibv_modify_qp`'s standard mask bits, `IBV_QP_STATE` to `IBV_QP_DEST_QPN`. Bits 21-24 were
/// once set by the kernel's rdma_ucm for RoCE (librdmacm masks them off too); none of the
/// others is an RTR or RTS attribute.
const STANDARD_MASK: u32 = (ibv_qp_attr_mask::IBV_QP_DEST_QPN.0 << 1) - 1;

// ---------------------------------------------------------------------------------------------
// The event channel and the CM identifiers.

/// An `rdma_event_channel` in non-blocking mode.
struct Channel(NonNull<rdma_event_channel>);

// SAFETY: an event channel is a file descriptor; librdmacm serialises what it shares between
// threads (its id table and each id's event counters) with its own locks.
unsafe impl Send for Channel {}
// SAFETY: as above; rdma_get_cm_event and rdma_destroy_id may run on different threads.
unsafe impl Sync for Channel {}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel; every id on it holds an Arc to it, so
        // none is left when this runs.
        unsafe { rdma_destroy_event_channel(self.0.as_ptr()) };
    }
}

impl Channel {
    fn new() -> Result<Arc<Channel>> {
        // SAFETY: no arguments; returns NULL with errno set on failure.
        let raw = unsafe { rdma_create_event_channel() };
        let Some(raw) = NonNull::new(raw) else {
            let reason = io::Error::last_os_error();
            let hint = if reason.raw_os_error() == Some(libc::EOPNOTSUPP) {
                "librdmacm.so.1 could not be loaded: install rdma-core's librdmacm \
                 (Debian/Ubuntu: apt-get install librdmacm1)"
            } else {
                "is the rdma_ucm kernel module loaded (/dev/infiniband/rdma_cm)?"
            };
            return Err(VerbsError::Call {
                call: "rdma_create_event_channel",
                reason,
            }
            .with_hint(hint.to_string()));
        };
        let channel = Channel(raw);
        set_nonblocking(channel.fd()).map_err(|reason| VerbsError::Call {
            call: "fcntl(O_NONBLOCK) on the RDMA CM event channel",
            reason,
        })?;
        Ok(Arc::new(channel))
    }

    fn fd(&self) -> c_int {
        // SAFETY: the channel is alive; `fd` is set once by librdmacm.
        unsafe { (*self.0.as_ptr()).fd }
    }

    /// A new identifier in the TCP port space (RC), whose events come to this channel.
    fn create_id(self: &Arc<Self>) -> Result<Id> {
        let mut raw: *mut rdma_cm_id = ptr::null_mut();
        // SAFETY: the channel is alive; `raw` receives the new id.
        let rc = unsafe {
            rdma_create_id(
                self.0.as_ptr(),
                &mut raw,
                ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        match NonNull::new(raw) {
            Some(raw) if rc == 0 => Ok(Id {
                raw,
                _channel: self.clone(),
            }),
            _ => Err(last_error("rdma_create_id")),
        }
    }

    /// The next event, already acknowledged (so no id ever waits on it in `rdma_destroy_id`),
    /// or an error once `deadline` has passed. `call` and `waiting_for` word the timeout.
    fn next_event(
        self: &Arc<Self>,
        deadline: Instant,
        call: &'static str,
        waiting_for: &str,
    ) -> Result<Event> {
        loop {
            let mut raw: *mut rdma_cm_event = ptr::null_mut();
            // SAFETY: the channel is alive and non-blocking; `raw` receives the event.
            let rc = unsafe { rdma_get_cm_event(self.0.as_ptr(), &mut raw) };
            if rc == 0 {
                if let Some(raw) = NonNull::new(raw) {
                    return Ok(self.take(raw));
                }
            } else {
                let err = io::Error::last_os_error();
                if !matches!(
                    err.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) {
                    return Err(VerbsError::Call {
                        call: "rdma_get_cm_event",
                        reason: err,
                    });
                }
            }
            let Some(left) = remaining(deadline, Instant::now()) else {
                return Err(VerbsError::Call {
                    call,
                    reason: io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no {waiting_for} before the deadline"),
                    ),
                });
            };
            wait_readable(self.fd(), millis_ceil(left)).map_err(|reason| VerbsError::Call {
                call: "poll on the RDMA CM event channel",
                reason,
            })?;
        }
    }

    /// Copies out what rdmabench needs from an event and acknowledges it.
    fn take(self: &Arc<Self>, raw: NonNull<rdma_cm_event>) -> Event {
        // SAFETY: librdmacm returned this event and it is not acknowledged yet; the `conn`
        // member of the union is the one filled for ids of the TCP port space.
        let (kind, status, id, remote_qpn) = unsafe {
            let e = raw.as_ref();
            (e.event, e.status, e.id, e.param.conn.qp_num)
        };
        // A connection request comes with a new id, which is ours to accept or destroy.
        let request = match NonNull::new(id) {
            Some(raw) if kind == ev::RDMA_CM_EVENT_CONNECT_REQUEST => Some(Id {
                raw,
                _channel: self.clone(),
            }),
            _ => None,
        };
        // SAFETY: acknowledged once; nothing above keeps a reference into it.
        unsafe { rdma_ack_cm_event(raw.as_ptr()) };
        Event {
            kind,
            status,
            id,
            remote_qpn,
            request,
        }
    }
}

/// An `rdma_cm_id`, destroyed on drop; it keeps its event channel alive.
struct Id {
    raw: NonNull<rdma_cm_id>,
    _channel: Arc<Channel>,
}

// SAFETY: a CM id may be used and destroyed from any thread (librdmacm locks what it shares).
unsafe impl Send for Id {}

impl Drop for Id {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_id or delivered by a CONNECT_REQUEST, destroyed once.
        // Every event was acknowledged as it arrived, so this does not wait on one; the
        // kernel rejects a request never accepted and disconnects a connection.
        unsafe { rdma_destroy_id(self.raw.as_ptr()) };
    }
}

impl Id {
    fn as_ptr(&self) -> *mut rdma_cm_id {
        self.raw.as_ptr()
    }

    /// The device and port the id is bound to, once bound.
    fn device(&self) -> Option<(String, u8)> {
        // SAFETY: the id is alive; `verbs` and `port_num` are set by librdmacm once bound.
        let (verbs, port) = unsafe { ((*self.as_ptr()).verbs, (*self.as_ptr()).port_num) };
        // SAFETY: a non-null `verbs` is a context librdmacm keeps open while the id lives.
        let name = unsafe { context_device_name(verbs) }?;
        Some((name, port))
    }

    /// The address the id is bound to (`route.addr.src_addr`).
    fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is alive; librdmacm fills the storage after a bind or listen.
        let storage = unsafe { (*self.as_ptr()).route.addr.src_addr_union.src_storage };
        from_sockaddr(&storage)
    }

    fn bind(&self, addr: SocketAddr) -> Result<()> {
        let mut storage = to_sockaddr(addr);
        // SAFETY: the id is alive; the address lives on the stack through the call, which
        // copies it.
        let rc = unsafe {
            rdma_bind_addr(
                self.as_ptr(),
                (&mut storage as *mut libc::sockaddr_storage).cast(),
            )
        };
        if rc != 0 {
            return Err(last_error("rdma_bind_addr").with_hint(format!(
                "address {addr}: is it the IP address of an RDMA device's netdev, and is the \
                 port free in the RDMA CM's port space?"
            )));
        }
        Ok(())
    }

    /// `rdma_reject`, errors ignored: the id is about to be destroyed, which rejects too.
    fn reject(&self) {
        // SAFETY: the id is alive; no private data.
        unsafe { rdma_reject(self.as_ptr(), ptr::null(), 0) };
    }

    /// `rdma_init_qp_attr` for `state`.
    fn qp_attr(&self, state: ibv_qp_state::Type) -> Result<(ibv_qp_attr, u32)> {
        // SAFETY: ibv_qp_attr is plain data; zero is a valid value for every field.
        let mut attr: ibv_qp_attr = unsafe { mem::zeroed() };
        attr.qp_state = state;
        let mut mask: c_int = 0;
        // SAFETY: the id is alive; attr and mask live through the call.
        let rc = unsafe { rdma_init_qp_attr(self.as_ptr(), &mut attr, &mut mask) };
        if rc != 0 {
            return Err(last_error("rdma_init_qp_attr"));
        }
        Ok((attr, mask as u32))
    }
}

/// What rdmabench keeps of one CM event (acknowledged already).
struct Event {
    kind: u32,
    status: i32,
    /// The id the event is about (for a request: the new id), compared, never dereferenced.
    id: *mut rdma_cm_id,
    /// The peer's QP number, in connection requests and replies.
    remote_qpn: u32,
    /// A connection request's new id.
    request: Option<Id>,
}

// ---------------------------------------------------------------------------------------------
// The public API.

/// A listening RDMA CM identifier, the passive side of `-R`: accepts one connection per QP.
pub struct CmListener {
    // Dropped first: requests never asked for are rejected (see `Drop`) and destroyed.
    pending: Vec<Pending>,
    id: Id,
    channel: Arc<Channel>,
}

/// A connection request kept for a later [`CmListener::accept_qp`].
struct Pending {
    id: Id,
    remote_qpn: u32,
}

impl fmt::Debug for CmListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmListener")
            .field("addr", &self.local_addr())
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl Drop for CmListener {
    fn drop(&mut self) {
        for p in &self.pending {
            p.id.reject();
        }
    }
}

impl CmListener {
    /// Listens for connection requests on `addr` (`0.0.0.0` or `::` for every RDMA device;
    /// port 0 for one the kernel picks, see [`CmListener::local_addr`]). The RDMA CM's port
    /// space is its own: the port may be the same number as a TCP port in use.
    pub fn bind(addr: SocketAddr) -> Result<CmListener> {
        let channel = Channel::new()?;
        let id = channel.create_id()?;
        id.bind(addr)?;
        // SAFETY: the id is alive and bound.
        if unsafe { rdma_listen(id.as_ptr(), LISTEN_BACKLOG) } != 0 {
            return Err(last_error("rdma_listen").with_hint(format!("on {addr}")));
        }
        Ok(CmListener {
            pending: Vec::new(),
            id,
            channel,
        })
    }

    /// The address and port listened on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }

    /// Waits until `deadline` for the connection request of the peer's QP `remote_qpn`
    /// (requests for other QPs are kept for later calls), moves `qp` to RTR and RTS with the
    /// CM's attributes and `path`'s overrides (see the module documentation), accepts with
    /// `qp`'s number and waits for the connection to be established. RC only. On an error
    /// the request is rejected and `qp` is destroyed.
    pub fn accept_qp(
        &mut self,
        qp: QueuePair<Created>,
        remote_qpn: u32,
        path: &PathConfig,
        deadline: Instant,
    ) -> Result<(QueuePair<ReadyToSend>, CmConnection)> {
        require_rc(&qp)?;
        let channel = self.channel.clone();
        let listener = self.id.as_ptr();
        let waiting_for = format!("RDMA_CM_EVENT_CONNECT_REQUEST from the peer's QP {remote_qpn}");
        let request = loop {
            if let Some(i) = self.pending.iter().position(|p| p.remote_qpn == remote_qpn) {
                break self.pending.swap_remove(i).id;
            }
            let event = channel.next_event(deadline, "rdma_listen", &waiting_for)?;
            if let Some(id) = absorb(&mut self.pending, listener, event, Some(remote_qpn)) {
                break id;
            }
        };
        let (qp, path_mtu) = match accept_request(&request, qp, remote_qpn, path) {
            Ok(done) => done,
            Err(e) => {
                request.reject();
                return Err(e);
            }
        };
        let pending = &mut self.pending;
        wait_for(
            &channel,
            &request,
            ev::RDMA_CM_EVENT_ESTABLISHED,
            "rdma_accept",
            deadline,
            |other| {
                // Requests for the next QPs may come first; keep them.
                absorb(pending, listener, other, None);
            },
        )?;
        Ok((
            qp,
            CmConnection {
                id: request,
                remote_qpn,
                path_mtu,
            },
        ))
    }
}

/// An established RDMA CM connection: keep it for as long as the QP is used. Dropping it
/// disconnects (errors ignored, nothing waited for) and destroys the CM identifier.
pub struct CmConnection {
    id: Id,
    remote_qpn: u32,
    path_mtu: u32,
}

impl fmt::Debug for CmConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmConnection")
            .field("remote_qpn", &self.remote_qpn)
            .field("path_mtu", &self.path_mtu)
            .finish()
    }
}

impl CmConnection {
    /// The peer's QP number, as the CM exchanged it.
    pub fn remote_qpn(&self) -> u32 {
        self.remote_qpn
    }

    /// The path MTU the QP was moved to RTR with, in bytes: the smaller of the CM's and
    /// [`PathConfig::mtu`].
    pub fn path_mtu(&self) -> u32 {
        self.path_mtu
    }
}

impl Drop for CmConnection {
    fn drop(&mut self) {
        // SAFETY: the id is alive. rdma_disconnect sends a DREQ and returns; it touches no QP
        // (the id has none).
        unsafe { rdma_disconnect(self.id.as_ptr()) };
    }
}

/// The active side of `-R`: binds `src` (the local RoCE/IPoIB address of `qp`'s device; in a
/// soft-RoCE guest where every address is local, without it the route would leave through
/// `lo` to the wrong device), resolves `dst`'s address and route, checks that they leave
/// through `qp`'s device and `path.port`, sends a connection request carrying `qp`'s number,
/// and on the reply moves `qp` to RTR and RTS with the CM's attributes and `path`'s
/// overrides (see the module documentation) before establishing. Every step waits until
/// `deadline` at most. RC only; on an error `qp` is destroyed. `src` unspecified (`0.0.0.0`)
/// lets the routing table choose.
pub fn cm_connect(
    qp: QueuePair<Created>,
    src: IpAddr,
    dst: SocketAddr,
    path: &PathConfig,
    deadline: Instant,
) -> Result<(QueuePair<ReadyToSend>, CmConnection)> {
    require_rc(&qp)?;
    // SAFETY: the QP is alive and so is its context.
    let ours = unsafe { context_device_name(qp.verbs_context()) }.unwrap_or_default();
    let channel = Channel::new()?;
    let id = channel.create_id()?;
    let on_other = |_: Event| {};

    resolve_addr(&channel, &id, src, dst, deadline)?;
    let Some((dev, port)) = id.device() else {
        return Err(VerbsError::InvalidRequest(format!(
            "the RDMA CM resolved {dst} from {src} without binding an RDMA device"
        )));
    };
    check_device(
        &dev,
        port,
        &ours,
        path.port,
        &format!("the route {src} -> {dst}"),
    )?;

    if path.traffic_class != 0 {
        set_tos(&id, path.traffic_class)?;
    }
    resolve_route(&channel, &id, (src, dst), deadline)?;

    let mut param = conn_param(qp.qpn(), path);
    // SAFETY: the id is alive with its route resolved; param lives through the call.
    if unsafe { rdma_connect(id.as_ptr(), &mut param) } != 0 {
        return Err(last_error("rdma_connect").with_hint(rd_atomic_hint(path)));
    }
    let reply = wait_for(
        &channel,
        &id,
        ev::RDMA_CM_EVENT_CONNECT_RESPONSE,
        "rdma_connect",
        deadline,
        on_other,
    )?;

    let (qp, path_mtu) = match cm_qp_attrs(&id, path).and_then(|(rtr, rts, mtu)| {
        let qp = qp.ready_to_send_with(&rtr, &rts)?;
        Ok((qp, mtu))
    }) {
        Ok(done) => done,
        Err(e) => {
            id.reject();
            return Err(e);
        }
    };
    // SAFETY: the id is alive; it has no QP, so this only sends the RTU.
    if unsafe { rdma_establish(id.as_ptr()) } != 0 {
        return Err(last_error("rdma_establish"));
    }
    Ok((
        qp,
        CmConnection {
            id,
            remote_qpn: reply.remote_qpn,
            path_mtu,
        },
    ))
}

// ---------------------------------------------------------------------------------------------
// The steps.

/// Gives the CM id the IP type of service `tos`, so that its connection's packets carry it.
fn set_tos(id: &Id, tos: u8) -> Result<()> {
    let mut tos = tos;
    // SAFETY: the id is alive; the option is one byte on the stack, copied by the call.
    let rc = unsafe {
        rdma_set_option(
            id.as_ptr(),
            RDMA_OPTION_ID,
            RDMA_OPTION_ID_TOS,
            (&mut tos as *mut u8).cast::<c_void>(),
            1,
        )
    };
    if rc != 0 {
        return Err(last_error("rdma_set_option(TOS)").with_hint(format!("TOS {tos}")));
    }
    Ok(())
}

/// Resolves the route of `id`, whose address is resolved, from `src` to `dst` by `deadline`.
fn resolve_route(
    channel: &Arc<Channel>,
    id: &Id,
    (src, dst): (IpAddr, SocketAddr),
    deadline: Instant,
) -> Result<()> {
    // SAFETY: the id is alive and its address resolved.
    if unsafe { rdma_resolve_route(id.as_ptr(), cm_timeout_ms(deadline)) } != 0 {
        return Err(last_error("rdma_resolve_route").with_hint(format!("{src} -> {dst}")));
    }
    wait_for(
        channel,
        id,
        ev::RDMA_CM_EVENT_ROUTE_RESOLVED,
        "rdma_resolve_route",
        deadline,
        |_: Event| {},
    )?;
    Ok(())
}

fn require_rc(qp: &QueuePair<Created>) -> Result<()> {
    if qp.transport() != Transport::Rc {
        return Err(VerbsError::InvalidRequest(format!(
            "the RDMA CM (-R) connects RC QPs only, not {}: connect {} QPs without -R",
            qp.transport().name(),
            qp.transport().name()
        )));
    }
    Ok(())
}

/// Checks the request's device, moves `qp` to RTS from the request's attributes, accepts.
fn accept_request(
    request: &Id,
    qp: QueuePair<Created>,
    remote_qpn: u32,
    path: &PathConfig,
) -> Result<(QueuePair<ReadyToSend>, u32)> {
    // SAFETY: the QP is alive and so is its context.
    let ours = unsafe { context_device_name(qp.verbs_context()) }.unwrap_or_default();
    let Some((dev, port)) = request.device() else {
        return Err(VerbsError::InvalidRequest(format!(
            "the connection request of the peer's QP {remote_qpn} came without an RDMA device"
        )));
    };
    check_device(
        &dev,
        port,
        &ours,
        path.port,
        &format!("the connection request of the peer's QP {remote_qpn}"),
    )?;
    let (rtr, rts, path_mtu) = cm_qp_attrs(request, path)?;
    if rtr.dest_qp_num() != remote_qpn {
        return Err(VerbsError::InvalidRequest(format!(
            "the RDMA CM gave destination QP {} for the request of the peer's QP {remote_qpn}",
            rtr.dest_qp_num()
        )));
    }
    let qp = qp.ready_to_send_with(&rtr, &rts)?;
    let mut param = conn_param(qp.qpn(), path);
    // SAFETY: the id is alive (a connection request not yet answered); param lives through
    // the call.
    if unsafe { rdma_accept(request.as_ptr(), &mut param) } != 0 {
        return Err(last_error("rdma_accept").with_hint(rd_atomic_hint(path)));
    }
    Ok((qp, path_mtu))
}

/// The RTR and RTS attributes from the CM, with rdmabench's overrides, and the path MTU.
fn cm_qp_attrs(
    id: &Id,
    path: &PathConfig,
) -> Result<(QueuePairAttribute, QueuePairAttribute, u32)> {
    let (mut rtr, mut rtr_mask) = id.qp_attr(ibv_qp_state::IBV_QPS_RTR)?;
    override_rtr(&mut rtr, &mut rtr_mask, path)?;
    let (mut rts, mut rts_mask) = id.qp_attr(ibv_qp_state::IBV_QPS_RTS)?;
    override_rts(&mut rts, &mut rts_mask, path);
    let mtu = mtu_code_bytes(rtr.path_mtu);
    Ok((
        QueuePairAttribute::from(&rtr, rtr_mask as i32),
        QueuePairAttribute::from(&rts, rts_mask as i32),
        mtu,
    ))
}

/// Waits for event `want` on `id`; events about other ids go to `other`. Error events about
/// `id` (and `want` with a non-zero status) become errors naming the event and its status.
fn wait_for(
    channel: &Arc<Channel>,
    id: &Id,
    want: u32,
    call: &'static str,
    deadline: Instant,
    mut other: impl FnMut(Event),
) -> Result<Event> {
    let waiting_for = event_name(want);
    loop {
        let event = channel.next_event(deadline, call, &waiting_for)?;
        if event.id != id.as_ptr() {
            other(event);
            continue;
        }
        match classify(event.kind, event.status, want) {
            Disposition::Wanted => return Ok(event),
            Disposition::Failed => return Err(event_error(call, event.kind, event.status)),
            Disposition::Ignored => {}
        }
    }
}

/// Files an event the listener was not waiting for: a request for `expected` is returned,
/// one for another QP kept (or rejected once `MAX_PENDING` are kept), a kept request the
/// peer gave up on dropped; the rest is ignored.
fn absorb(
    pending: &mut Vec<Pending>,
    listener: *mut rdma_cm_id,
    mut event: Event,
    expected: Option<u32>,
) -> Option<Id> {
    if let Some(id) = event.request.take() {
        if expected == Some(event.remote_qpn) {
            return Some(id);
        }
        if pending.len() < MAX_PENDING {
            pending.push(Pending {
                id,
                remote_qpn: event.remote_qpn,
            });
        } else {
            id.reject();
        }
        return None;
    }
    if event.id != listener && classify(event.kind, event.status, u32::MAX) == Disposition::Failed {
        pending.retain(|p| p.id.as_ptr() != event.id);
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Pure parts: attributes, events, deadlines, addresses.

/// The connection parameters rdmabench sends: our QP number, RDMA READ/atomic depths from
/// `path`, its retry count and RNR retry 7 (sideway's `ConnectionParameter::new` would send
/// 0).
fn conn_param(qpn: u32, path: &PathConfig) -> rdma_conn_param {
    rdma_conn_param {
        private_data: ptr::null(),
        private_data_len: 0,
        responder_resources: path.max_dest_rd_atomic,
        initiator_depth: path.max_rd_atomic,
        flow_control: 0,
        retry_count: path.retry_count,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: qpn & 0x00ff_ffff,
    }
}

fn rd_atomic_hint(path: &PathConfig) -> String {
    format!(
        "responder resources {} and initiator depth {} must not exceed the device's \
         max_qp_rd_atom and max_qp_init_rd_atom",
        path.max_dest_rd_atomic, path.max_rd_atomic
    )
}

/// The CM's RTR attributes with rdmabench's: the smaller path MTU, `max_dest_rd_atomic`,
/// `min_rnr_timer` 12, and the traffic class and service level where `path` sets them.
fn override_rtr(attr: &mut ibv_qp_attr, mask: &mut u32, path: &PathConfig) -> Result<()> {
    let ours = mtu_from_bytes(path.mtu).ok_or_else(|| {
        VerbsError::InvalidRequest(format!(
            "path MTU {} is not one of 256, 512, 1024, 2048, 4096",
            path.mtu
        ))
    })? as u32;
    *mask &= STANDARD_MASK;
    let cm = attr.path_mtu;
    attr.path_mtu = if (1..=5).contains(&cm) {
        cm.min(ours)
    } else {
        ours
    };
    attr.max_dest_rd_atomic = path.max_dest_rd_atomic;
    attr.min_rnr_timer = MIN_RNR_TIMER;
    *mask |= ibv_qp_attr_mask::IBV_QP_PATH_MTU.0
        | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0
        | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0;
    if *mask & ibv_qp_attr_mask::IBV_QP_AV.0 != 0 {
        if attr.ah_attr.is_global != 0 && path.traffic_class != 0 {
            attr.ah_attr.grh.traffic_class = path.traffic_class;
        }
        if path.service_level != 0 {
            attr.ah_attr.sl = path.service_level;
        }
    }
    Ok(())
}

/// The bytes of an `ibv_mtu` code (1: 256 .. 5: 4096); 0 for anything else.
fn mtu_code_bytes(code: u32) -> u32 {
    if (1..=5).contains(&code) {
        128 << code
    } else {
        0
    }
}

/// The CM's RTS attributes with rdmabench's: timeout, retry count, RNR retry 7, `max_rd_atomic`.
fn override_rts(attr: &mut ibv_qp_attr, mask: &mut u32, path: &PathConfig) {
    *mask &= STANDARD_MASK;
    attr.timeout = path.qp_timeout;
    attr.retry_cnt = path.retry_count;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = path.max_rd_atomic;
    *mask |= ibv_qp_attr_mask::IBV_QP_TIMEOUT.0
        | ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0
        | ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0
        | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0;
}

/// What a wait does with an event about the id it waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disposition {
    /// The event waited for, successful.
    Wanted,
    /// The step (or the connection) failed.
    Failed,
    /// Harmless here (an address change, a time-wait exit, ...).
    Ignored,
}

fn classify(kind: u32, status: i32, want: u32) -> Disposition {
    match kind {
        k if k == want && status == 0 => Disposition::Wanted,
        k if k == want => Disposition::Failed,
        ev::RDMA_CM_EVENT_ADDR_ERROR
        | ev::RDMA_CM_EVENT_ROUTE_ERROR
        | ev::RDMA_CM_EVENT_CONNECT_ERROR
        | ev::RDMA_CM_EVENT_UNREACHABLE
        | ev::RDMA_CM_EVENT_REJECTED
        | ev::RDMA_CM_EVENT_DISCONNECTED
        | ev::RDMA_CM_EVENT_DEVICE_REMOVAL => Disposition::Failed,
        _ => Disposition::Ignored,
    }
}

/// librdmacm's name of an event type (`rdma_event_str`, without needing the library).
fn event_name(kind: u32) -> Cow<'static, str> {
    Cow::Borrowed(match kind {
        ev::RDMA_CM_EVENT_ADDR_RESOLVED => "RDMA_CM_EVENT_ADDR_RESOLVED",
        ev::RDMA_CM_EVENT_ADDR_ERROR => "RDMA_CM_EVENT_ADDR_ERROR",
        ev::RDMA_CM_EVENT_ROUTE_RESOLVED => "RDMA_CM_EVENT_ROUTE_RESOLVED",
        ev::RDMA_CM_EVENT_ROUTE_ERROR => "RDMA_CM_EVENT_ROUTE_ERROR",
        ev::RDMA_CM_EVENT_CONNECT_REQUEST => "RDMA_CM_EVENT_CONNECT_REQUEST",
        ev::RDMA_CM_EVENT_CONNECT_RESPONSE => "RDMA_CM_EVENT_CONNECT_RESPONSE",
        ev::RDMA_CM_EVENT_CONNECT_ERROR => "RDMA_CM_EVENT_CONNECT_ERROR",
        ev::RDMA_CM_EVENT_UNREACHABLE => "RDMA_CM_EVENT_UNREACHABLE",
        ev::RDMA_CM_EVENT_REJECTED => "RDMA_CM_EVENT_REJECTED",
        ev::RDMA_CM_EVENT_ESTABLISHED => "RDMA_CM_EVENT_ESTABLISHED",
        ev::RDMA_CM_EVENT_DISCONNECTED => "RDMA_CM_EVENT_DISCONNECTED",
        ev::RDMA_CM_EVENT_DEVICE_REMOVAL => "RDMA_CM_EVENT_DEVICE_REMOVAL",
        ev::RDMA_CM_EVENT_MULTICAST_JOIN => "RDMA_CM_EVENT_MULTICAST_JOIN",
        ev::RDMA_CM_EVENT_MULTICAST_ERROR => "RDMA_CM_EVENT_MULTICAST_ERROR",
        ev::RDMA_CM_EVENT_ADDR_CHANGE => "RDMA_CM_EVENT_ADDR_CHANGE",
        ev::RDMA_CM_EVENT_TIMEWAIT_EXIT => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        other => return Cow::Owned(format!("RDMA CM event {other}")),
    })
}

/// An event's status in words: a rejection's IB CM reason, else a negative errno.
fn status_text(kind: u32, status: i32) -> String {
    match (kind, status) {
        (ev::RDMA_CM_EVENT_REJECTED, 8) => "reject reason 8, invalid service ID: nothing \
            listens on that address and port in the RDMA CM (is the server up and using -R?)"
            .to_string(),
        (ev::RDMA_CM_EVENT_REJECTED, 28) => "reject reason 28, consumer defined: the peer \
            refused the request (a QP it does not expect, or it gave up waiting)"
            .to_string(),
        (ev::RDMA_CM_EVENT_REJECTED, s) if s > 0 => format!("IB CM reject reason {s}"),
        (_, s) if s < 0 => format!(
            "status {s}: {}",
            io::Error::from_raw_os_error(s.saturating_neg())
        ),
        (_, s) => format!("status {s}"),
    }
}

fn event_error(call: &'static str, kind: u32, status: i32) -> VerbsError {
    let io_kind = match kind {
        ev::RDMA_CM_EVENT_REJECTED => io::ErrorKind::ConnectionRefused,
        ev::RDMA_CM_EVENT_DISCONNECTED => io::ErrorKind::ConnectionReset,
        _ => io::ErrorKind::Other,
    };
    VerbsError::Call {
        call,
        reason: io::Error::new(
            io_kind,
            format!("{} ({})", event_name(kind), status_text(kind, status)),
        ),
    }
}

/// The CM's device and port must be the QP's: a QP cannot be connected through another.
fn check_device(cm_dev: &str, cm_port: u8, qp_dev: &str, qp_port: u8, what: &str) -> Result<()> {
    if cm_dev == qp_dev && cm_port == qp_port {
        return Ok(());
    }
    Err(VerbsError::InvalidRequest(format!(
        "the RDMA CM puts {what} on {cm_dev} port {cm_port}, but the QP is on {qp_dev} port \
         {qp_port}: use the IP address of {qp_dev}'s netdev, or the device that owns the address"
    )))
}

/// Time left before `deadline`, none once it has come.
fn remaining(deadline: Instant, now: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(now)
        .filter(|left| !left.is_zero())
}

/// A duration in whole milliseconds for `poll` and librdmacm, rounded up (a wait never ends
/// before the deadline, so it never spins), at least 1, at most `c_int::MAX`.
fn millis_ceil(d: Duration) -> c_int {
    let ms = d.as_nanos().div_ceil(1_000_000);
    ms.clamp(1, c_int::MAX as u128) as c_int
}

/// The timeout for `rdma_resolve_addr`/`rdma_resolve_route`: the time left (at least 1 ms;
/// the wait for their event ends at the deadline anyway).
/// How long one address resolution may take before it is asked again (perftest's and rping's
/// 2 s). The kernel resolves the neighbour once per request: a request whose ARP reply came
/// late can sit until its own timeout, while a new one finds the neighbour resolved.
const RESOLVE_TRY: Duration = Duration::from_secs(2);

/// `rdma_resolve_addr` from `src` (unspecified: the routing table's choice) to `dst`, asked
/// again every [`RESOLVE_TRY`] that ends in ADDR_ERROR, until `deadline`.
fn resolve_addr(
    channel: &Arc<Channel>,
    id: &Id,
    src: IpAddr,
    dst: SocketAddr,
    deadline: Instant,
) -> Result<()> {
    loop {
        let try_until = deadline.min(Instant::now() + RESOLVE_TRY);
        let mut src_storage = to_sockaddr(SocketAddr::new(src, 0));
        let src_ptr: *mut libc::sockaddr = if src.is_unspecified() {
            ptr::null_mut()
        } else {
            (&mut src_storage as *mut libc::sockaddr_storage).cast()
        };
        let mut dst_storage = to_sockaddr(dst);
        // SAFETY: the id is alive; both addresses live on the stack through the call, which
        // copies them (the source is bound by the first call and kept by the id).
        let rc = unsafe {
            rdma_resolve_addr(
                id.as_ptr(),
                src_ptr,
                (&mut dst_storage as *mut libc::sockaddr_storage).cast(),
                cm_timeout_ms(try_until),
            )
        };
        if rc != 0 {
            return Err(last_error("rdma_resolve_addr").with_hint(format!("{src} -> {dst}")));
        }
        if resolved(channel, id, deadline)? {
            return Ok(());
        }
    }
}

/// Waits for `id`'s answer to an address resolution: true when resolved, false on an
/// ADDR_ERROR with time left to ask again; any other failure, or the deadline, is an error.
fn resolved(channel: &Arc<Channel>, id: &Id, deadline: Instant) -> Result<bool> {
    let want = ev::RDMA_CM_EVENT_ADDR_RESOLVED;
    loop {
        let event = channel.next_event(deadline, "rdma_resolve_addr", &event_name(want))?;
        if event.id != id.as_ptr() {
            continue;
        }
        if event.kind == ev::RDMA_CM_EVENT_ADDR_ERROR && Instant::now() < deadline {
            return Ok(false);
        }
        match classify(event.kind, event.status, want) {
            Disposition::Wanted => return Ok(true),
            Disposition::Failed => {
                return Err(event_error("rdma_resolve_addr", event.kind, event.status))
            }
            Disposition::Ignored => {}
        }
    }
}

fn cm_timeout_ms(deadline: Instant) -> c_int {
    millis_ceil(remaining(deadline, Instant::now()).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests;
