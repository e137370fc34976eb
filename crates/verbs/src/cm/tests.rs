use super::*;

fn path() -> PathConfig {
    PathConfig {
        mtu: 2048,
        max_dest_rd_atomic: 16,
        max_rd_atomic: 8,
        qp_timeout: 18,
        ..PathConfig::default()
    }
}

fn zeroed_attr() -> ibv_qp_attr {
    // SAFETY: ibv_qp_attr is plain data; zero is valid.
    unsafe { mem::zeroed() }
}

#[test]
fn error_events_fail_the_wait_and_name_event_and_status() {
    for kind in [
        ev::RDMA_CM_EVENT_REJECTED,
        ev::RDMA_CM_EVENT_UNREACHABLE,
        ev::RDMA_CM_EVENT_CONNECT_ERROR,
        ev::RDMA_CM_EVENT_ADDR_ERROR,
        ev::RDMA_CM_EVENT_ROUTE_ERROR,
    ] {
        assert_eq!(
            classify(kind, -110, ev::RDMA_CM_EVENT_ESTABLISHED),
            Disposition::Failed
        );
    }
    let e = event_error("rdma_resolve_addr", ev::RDMA_CM_EVENT_ADDR_ERROR, -110);
    let text = e.to_string();
    assert!(text.starts_with("rdma_resolve_addr failed: RDMA_CM_EVENT_ADDR_ERROR (status -110: "));
    assert!(text.contains("timed out"), "{text}");
}

#[test]
fn a_rejection_says_why_in_words() {
    let e = event_error("rdma_connect", ev::RDMA_CM_EVENT_REJECTED, 8);
    assert!(e
        .to_string()
        .contains("RDMA_CM_EVENT_REJECTED (reject reason 8, invalid service ID"));
    let e = event_error("rdma_connect", ev::RDMA_CM_EVENT_REJECTED, 5);
    assert!(e
        .to_string()
        .ends_with("RDMA_CM_EVENT_REJECTED (IB CM reject reason 5)"));
    match event_error("rdma_connect", ev::RDMA_CM_EVENT_REJECTED, 28) {
        VerbsError::Call { reason, .. } => {
            assert_eq!(reason.kind(), io::ErrorKind::ConnectionRefused)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_wanted_event_passes_unless_its_status_says_otherwise() {
    let want = ev::RDMA_CM_EVENT_CONNECT_RESPONSE;
    assert_eq!(classify(want, 0, want), Disposition::Wanted);
    assert_eq!(classify(want, -22, want), Disposition::Failed);
    assert_eq!(
        classify(ev::RDMA_CM_EVENT_ADDR_CHANGE, 0, want),
        Disposition::Ignored
    );
    assert_eq!(
        classify(ev::RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, want),
        Disposition::Ignored
    );
    assert_eq!(
        classify(ev::RDMA_CM_EVENT_DISCONNECTED, 0, want),
        Disposition::Failed
    );
    // Newer librdmacm event types (ADDRINFO_*, 16 and up) neither panic nor fail a wait.
    assert_eq!(classify(16, 0, want), Disposition::Ignored);
    assert_eq!(event_name(16), "RDMA CM event 16");
    assert_eq!(
        event_name(ev::RDMA_CM_EVENT_ESTABLISHED),
        "RDMA_CM_EVENT_ESTABLISHED"
    );
}

#[test]
fn deadlines_round_up_and_end() {
    let now = Instant::now();
    assert_eq!(remaining(now, now), None);
    assert_eq!(remaining(now, now + Duration::from_millis(1)), None);
    assert_eq!(
        remaining(now + Duration::from_millis(5), now),
        Some(Duration::from_millis(5))
    );
    assert_eq!(millis_ceil(Duration::from_nanos(1)), 1);
    assert_eq!(millis_ceil(Duration::ZERO), 1);
    assert_eq!(millis_ceil(Duration::from_millis(1)), 1);
    assert_eq!(millis_ceil(Duration::from_micros(1500)), 2);
    assert_eq!(millis_ceil(Duration::from_secs(u64::MAX)), c_int::MAX);
    assert_eq!(cm_timeout_ms(now), 1);
    let later = cm_timeout_ms(Instant::now() + Duration::from_secs(2));
    assert!((1900..=2000).contains(&later), "{later}");
}

#[test]
fn rtr_takes_the_smaller_mtu_and_our_limits() {
    let mut attr = zeroed_attr();
    attr.path_mtu = 5; // 4096 from the CM
    attr.min_rnr_timer = 0;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.traffic_class = 0;
    let mut mask = ibv_qp_attr_mask::IBV_QP_STATE.0 | ibv_qp_attr_mask::IBV_QP_AV.0 | (1 << 22);
    let p = PathConfig {
        traffic_class: 106,
        service_level: 3,
        ..path()
    };
    override_rtr(&mut attr, &mut mask, &p).unwrap();
    assert_eq!(attr.path_mtu, 4); // 2048, ours
    assert_eq!(attr.max_dest_rd_atomic, 16);
    assert_eq!(attr.min_rnr_timer, 12);
    assert_eq!(attr.ah_attr.grh.traffic_class, 106);
    assert_eq!(attr.ah_attr.sl, 3);
    assert_eq!(mask & (1 << 22), 0, "RoCE-era kernel bits are masked off");
    for bit in [
        ibv_qp_attr_mask::IBV_QP_STATE,
        ibv_qp_attr_mask::IBV_QP_AV,
        ibv_qp_attr_mask::IBV_QP_PATH_MTU,
        ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC,
        ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER,
    ] {
        assert_ne!(mask & bit.0, 0);
    }

    let mut attr = zeroed_attr();
    attr.path_mtu = 3; // 1024 from the CM, smaller than ours
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.traffic_class = 32; // e.g. default_roce_tos
    attr.ah_attr.sl = 2;
    let mut mask = ibv_qp_attr_mask::IBV_QP_AV.0;
    override_rtr(&mut attr, &mut mask, &path()).unwrap();
    assert_eq!(attr.path_mtu, 3);
    assert_eq!(attr.ah_attr.grh.traffic_class, 32, "0 keeps the CM's");
    assert_eq!(attr.ah_attr.sl, 2, "0 keeps the CM's");

    let mut mask = 0;
    let bad = PathConfig {
        mtu: 1500,
        ..path()
    };
    assert!(override_rtr(&mut zeroed_attr(), &mut mask, &bad).is_err());
}

#[test]
fn mtu_codes_are_bytes() {
    assert_eq!(
        (1..=5).map(mtu_code_bytes).collect::<Vec<_>>(),
        [256, 512, 1024, 2048, 4096]
    );
    assert_eq!(mtu_code_bytes(0), 0);
    for bytes in [256, 512, 1024, 2048, 4096] {
        let code = mtu_from_bytes(bytes).unwrap() as u32;
        assert_eq!(mtu_code_bytes(code), bytes);
    }
}

#[test]
fn rts_retries_seven_times_with_our_timeout() {
    let mut attr = zeroed_attr();
    let mut mask = ibv_qp_attr_mask::IBV_QP_STATE.0 | ibv_qp_attr_mask::IBV_QP_SQ_PSN.0;
    override_rts(&mut attr, &mut mask, &path());
    assert_eq!(
        (
            attr.timeout,
            attr.retry_cnt,
            attr.rnr_retry,
            attr.max_rd_atomic
        ),
        (18, 7, 7, 8)
    );
    assert_ne!(mask & ibv_qp_attr_mask::IBV_QP_SQ_PSN.0, 0);
    assert_ne!(mask & ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0, 0);
}

#[test]
fn the_connection_parameters_carry_our_qp_and_retries() {
    let p = conn_param(0x0100_1234, &path());
    assert_eq!(p.qp_num, 0x1234);
    assert_eq!((p.retry_count, p.rnr_retry_count), (7, 7));
    assert_eq!((p.responder_resources, p.initiator_depth), (16, 8));
}

#[test]
fn socket_addresses_survive_the_round_trip() {
    for text in ["192.0.2.7:18515", "[fe80::1%3]:4791", "0.0.0.0:0"] {
        let addr: SocketAddr = text.parse().unwrap();
        assert_eq!(from_sockaddr(&to_sockaddr(addr)), Some(addr), "{text}");
    }
    let storage = to_sockaddr("10.0.0.1:258".parse().unwrap());
    // SAFETY: to_sockaddr wrote a sockaddr_in.
    let sin = unsafe { &*(&storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
    assert_eq!(sin.sin_port.to_ne_bytes(), [1, 2], "network byte order");
    assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 0, 0, 1]);
}

#[test]
fn listeners_and_connections_can_move_to_another_thread() {
    fn send<T: Send>() {}
    send::<CmListener>();
    send::<CmConnection>();
}

#[test]
fn a_device_mismatch_names_both_sides() {
    assert!(check_device("rxe0", 1, "rxe0", 1, "x").is_ok());
    let e = check_device("rxe1", 1, "rxe0", 1, "the route 10.0.0.2 -> 10.0.0.1:1")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rxe1 port 1") && e.contains("rxe0 port 1"),
        "{e}"
    );
    assert!(check_device("rxe0", 2, "rxe0", 1, "x").is_err());
}

#[test]
fn binding_without_an_rdma_stack_is_an_error_not_a_panic() {
    // On a host with the RDMA CM this listens on a free port; without one it must say
    // which call failed.
    match CmListener::bind("0.0.0.0:0".parse().unwrap()) {
        Ok(l) => assert!(l.local_addr().is_some()),
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains("rdma_"), "{text}");
        }
    }
}
