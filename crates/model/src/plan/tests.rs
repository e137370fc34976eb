use super::*;

const WRITE_BW: TestKind = TestKind::new(Verb::Write, Mode::Bw);

fn request() -> PlanRequest {
    PlanRequest::default()
}

#[test]
fn defaults_are_perftests() {
    let plan = request().resolve(WRITE_BW).unwrap();
    assert_eq!(plan.sizes, vec![65536]);
    assert_eq!(
        (plan.iters, plan.qps, plan.tx_depth, plan.cq_mod),
        (5000, 1, 128, 64),
        "perftest's 100 would let the queue run down to 28 before a completion frees it"
    );
    let deep = PlanRequest {
        tx_depth: Some(512),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap();
    assert_eq!(deep.cq_mod, 100);
    let lat = request()
        .resolve(TestKind::new(Verb::Send, Mode::Lat))
        .unwrap();
    assert_eq!((lat.sizes[0], lat.iters, lat.rx_depth), (2, 1000, 512));
}

#[test]
fn cq_mod_default_shrinks_to_fit_a_small_tx_depth() {
    let plan = PlanRequest {
        tx_depth: Some(16),
        post_list: Some(4),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap();
    assert_eq!(plan.cq_mod, 8, "half of 16");
    let plan = PlanRequest {
        tx_depth: Some(16),
        post_list: Some(12),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap();
    assert_eq!(
        plan.cq_mod, 5,
        "room for a post list of 12 beyond 4 unsignaled"
    );
}

#[test]
fn outs_caps_reads_and_atomics_only() {
    for verb in [Verb::Read, Verb::Atomic] {
        let plan = PlanRequest {
            outs: Some(16),
            ..request()
        }
        .resolve(TestKind::new(verb, Mode::Bw))
        .unwrap();
        assert_eq!(plan.outs, Some(16));
    }
    let err = PlanRequest {
        outs: Some(16),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap_err();
    assert!(
        err.message()
            .contains("--outs 16 does not apply to write-bw"),
        "{err}"
    );
    let err = PlanRequest {
        outs: Some(0),
        ..request()
    }
    .resolve(TestKind::new(Verb::Read, Mode::Bw))
    .unwrap_err();
    assert!(
        err.message().starts_with(
            "--outs 0 is out of range: valid values are 1 up to what the devices allow"
        ),
        "{err}"
    );
    // Above 1 the devices' limit decides, and is named when they open: -o 1000 as -o 200.
    let plan = PlanRequest {
        outs: Some(1000),
        ..request()
    }
    .resolve(TestKind::new(Verb::Read, Mode::Bw))
    .unwrap();
    assert_eq!(plan.outs, Some(1000));
}

#[test]
fn qp_timeout_is_rc_only_and_within_the_five_bit_range() {
    let plan = PlanRequest {
        qp_timeout: Some(18),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap();
    assert_eq!(plan.qp_timeout, Some(18));
    for (u, want) in [
        (
            0,
            "--qp-timeout 0 is out of range: valid values are 1 to 31",
        ),
        (
            32,
            "--qp-timeout 32 is out of range: valid values are 1 to 31",
        ),
    ] {
        let err = PlanRequest {
            qp_timeout: Some(u),
            ..request()
        }
        .resolve(WRITE_BW)
        .unwrap_err();
        assert_eq!(err.message(), want);
    }
    let err = PlanRequest {
        qp_timeout: Some(18),
        connection: Some(Connection::Uc),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap_err();
    assert_eq!(
        err.message(),
        "--qp-timeout 18 does not apply to write-bw over UC: only RC waits for acknowledgements"
    );
}

#[test]
fn a_stalling_combination_is_refused_with_the_numbers() {
    let err = PlanRequest {
        tx_depth: Some(128),
        cq_mod: Some(100),
        post_list: Some(64),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap_err();
    assert!(
        err.message().contains("at least 163") && err.message().contains("128"),
        "{err}"
    );
}

#[test]
fn out_of_range_values_name_the_flag_and_the_range() {
    let err = PlanRequest {
        qps: Some(0),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap_err();
    assert_eq!(
        err.message(),
        "--qps 0 is out of range: valid values are 1 to 1024"
    );
    let err = PlanRequest {
        sl: Some(16),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap_err();
    assert_eq!(
        err.message(),
        "--sl 16 is out of range: valid values are 0 to 15"
    );
    let err = PlanRequest {
        size: Some(0),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap_err();
    assert!(err.message().starts_with("--size 0"), "{err}");
    let err = PlanRequest {
        path_mtu: Some(1500),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap_err();
    assert!(
        err.message().contains("--mtu 1500") && err.message().contains("4096"),
        "{err}"
    );
    let err = PlanRequest {
        duration: Some(0.0),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap_err();
    assert!(err.message().contains("--duration 0"), "{err}");
}

#[test]
fn an_interval_is_refused_outside_one_d_window_naming_what_would_do() {
    let refused = |duration: Option<f64>, interval: f64, repeat: Option<u32>, t: TestKind| {
        PlanRequest {
            duration,
            interval: Some(interval),
            repeat,
            ..request()
        }
        .resolve(t)
        .unwrap_err()
        .message()
        .to_string()
    };
    let e = refused(None, 1.0, None, WRITE_BW);
    assert!(
        e.contains("--interval 1 cuts a -D run's window: add -D SECS"),
        "{e}"
    );
    // -D 10 measures 8 s: a tenth at each end is left out.
    let e = refused(Some(10.0), 9.0, None, WRITE_BW);
    assert!(e.contains("at least 0.1 and at most the measured window of -D 10 (8.000 s"));
    let e = refused(Some(10.0), 0.05, None, WRITE_BW);
    assert!(e.contains("--interval 0.05 is out of range"), "{e}");
    let e = refused(Some(3600.0), 0.1, None, WRITE_BW);
    assert!(
        e.contains("more than 10000 intervals: give at least 0.360"),
        "{e}"
    );
    let e = refused(Some(10.0), 1.0, Some(3), WRITE_BW);
    assert!(e.contains("with --repeat 3 the figures are medians"), "{e}");
    let e = refused(Some(10.0), 1.0, None, TestKind::new(Verb::Write, Mode::Lat));
    assert!(e.contains("--interval") && e.contains("latency"), "{e}");
    let ok = PlanRequest {
        duration: Some(10.0),
        interval: Some(1.0),
        ..request()
    };
    assert_eq!(ok.resolve(WRITE_BW).unwrap().interval, Some(1.0));
}

#[test]
fn verbs_a_transport_cannot_carry_are_refused_naming_both() {
    for (verb, conn, needle) in [
        (Verb::Read, Connection::Ud, "over UD"),
        (Verb::Write, Connection::Ud, "over UD"),
        (Verb::Atomic, Connection::Uc, "over UC"),
        (Verb::Read, Connection::Uc, "over UC"),
    ] {
        let err = PlanRequest {
            connection: Some(conn),
            ..request()
        }
        .resolve(TestKind::new(verb, Mode::Bw))
        .unwrap_err();
        assert!(err.message().contains(needle), "{err}");
    }
    for (verb, conn) in [
        (Verb::Send, Connection::Ud),
        (Verb::Write, Connection::Uc),
        (Verb::Send, Connection::Uc),
    ] {
        assert!(PlanRequest {
            connection: Some(conn),
            ..request()
        }
        .resolve(TestKind::new(verb, Mode::Bw))
        .is_ok());
    }
}

#[test]
fn atomics_are_eight_bytes() {
    let atomic = TestKind::new(Verb::Atomic, Mode::Bw);
    assert_eq!(request().resolve(atomic).unwrap().sizes, vec![8]);
    let err = PlanRequest {
        size: Some(64),
        ..request()
    }
    .resolve(atomic)
    .unwrap_err();
    assert!(
        err.message().contains("-s 64") && err.message().contains("8 bytes"),
        "{err}"
    );
    assert!(PlanRequest {
        all: true,
        ..request()
    }
    .resolve(atomic)
    .is_err());
}

#[test]
fn latency_tests_are_one_qp_one_direction() {
    let lat = TestKind::new(Verb::Write, Mode::Lat);
    assert!(PlanRequest {
        qps: Some(4),
        ..request()
    }
    .resolve(lat)
    .is_err());
    assert!(PlanRequest {
        bidirectional: true,
        ..request()
    }
    .resolve(lat)
    .is_err());
    assert!(PlanRequest {
        post_list: Some(4),
        ..request()
    }
    .resolve(lat)
    .is_err());
}

#[test]
fn server_adopts_what_it_was_not_given() {
    let client = PlanRequest {
        size: Some(4096),
        qps: Some(4),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap();
    let adopted = TestPlan::adopt(client.clone(), WRITE_BW, &request()).unwrap();
    assert_eq!(adopted, client);
}

#[test]
fn server_refuses_a_differing_explicit_value_naming_both() {
    let client = PlanRequest {
        size: Some(4096),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap();
    let server = PlanRequest {
        size: Some(65536),
        ..request()
    };
    let err = TestPlan::adopt(client, WRITE_BW, &server).unwrap_err();
    assert!(matches!(err, PlanError::Value(_)), "{err:?}");
    assert!(
        err.message().contains("server 64 KiB") && err.message().contains("client 4 KiB"),
        "{err}"
    );
    let client = request().resolve(WRITE_BW).unwrap();
    let server = PlanRequest {
        connection: Some(Connection::Uc),
        ..request()
    };
    let err = TestPlan::adopt(client, WRITE_BW, &server).unwrap_err();
    assert!(
        err.message().contains("connection: server UC, client RC"),
        "{err}"
    );
}

#[test]
fn the_server_prints_in_the_clients_unit() {
    // The client asked for Gb/s; a server that did not say adopts it.
    let client = PlanRequest {
        report_gbits: true,
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap();
    let adopted = TestPlan::adopt(client.clone(), WRITE_BW, &request()).unwrap();
    assert!(adopted.report_gbits);
    // A server given Gb/s when the client is not: refused, as any differing parameter.
    let server = PlanRequest {
        report_gbits: true,
        ..request()
    };
    let plain = request().resolve(WRITE_BW).unwrap();
    let err = TestPlan::adopt(plain, WRITE_BW, &server).unwrap_err();
    assert!(
        err.message()
            .contains("--report-gbits: server true, client false"),
        "{err}"
    );
}

#[test]
fn the_wire_refuses_a_plan_with_a_field_missing_or_unknown() {
    // Every field, optional ones included: a peer that lacks one refuses, naming it.
    let plan = PlanRequest {
        outs: Some(16),
        ..request()
    }
    .resolve(TestKind::new(Verb::Read, Mode::Bw))
    .unwrap();
    let full = serde_json::to_value(&plan).unwrap();
    let back: TestPlan = serde_json::from_value(full.clone()).unwrap();
    assert_eq!(back, plan);
    for key in full.as_object().unwrap().keys() {
        let mut less = full.clone();
        less.as_object_mut().unwrap().remove(key);
        let err = serde_json::from_value::<TestPlan>(less).unwrap_err();
        assert!(
            err.to_string().contains(&format!("missing field `{key}`")),
            "{err}"
        );
    }
    let mut more = full;
    more["tclass_from_the_future"] = serde_json::json!(106);
    let err = serde_json::from_value::<TestPlan>(more).unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown field `tclass_from_the_future`"),
        "{err}"
    );
}

#[test]
fn every_flag_the_server_may_give_is_compared_by_name() {
    // A request field that is not a planned parameter of the catalogue, or has no plan
    // field of the same name, would never be compared.
    let plan = serde_json::to_value(request().resolve(WRITE_BW).unwrap()).unwrap();
    let given = serde_json::to_value(request()).unwrap();
    for key in given.as_object().unwrap().keys() {
        if key != "size" && key != "all" {
            let row = crate::catalogue::param(key);
            assert!(
                row.is_some_and(|p| p.agree == Agree::Plan),
                "PlanRequest.{key} is not a planned parameter of the catalogue"
            );
            assert!(
                plan.get(key).is_some(),
                "PlanRequest.{key} is not in TestPlan"
            );
        }
    }
    let client = PlanRequest {
        tx_depth: Some(64),
        atomic: Some(AtomicOp::CompareSwap),
        ..request()
    }
    .resolve(TestKind::new(Verb::Atomic, Mode::Bw))
    .unwrap();
    let server = PlanRequest {
        tx_depth: Some(32),
        atomic: Some(AtomicOp::FetchAdd),
        validate: true,
        ..request()
    };
    let err = TestPlan::adopt(client, TestKind::new(Verb::Atomic, Mode::Bw), &server).unwrap_err();
    for needle in [
        "--tx-depth: server 32, client 64",
        "--atomic-type: server FETCH_AND_ADD, client CMP_AND_SWAP",
        "--validate: server true, client false",
    ] {
        assert!(err.message().contains(needle), "{needle}: {err}");
    }
}

#[test]
fn a_different_test_is_refused() {
    let client = request()
        .resolve(TestKind::new(Verb::Read, Mode::Bw))
        .unwrap();
    let err = TestPlan::adopt(client, WRITE_BW, &request()).unwrap_err();
    assert!(
        err.message().contains("server runs write-bw") && err.message().contains("read-bw"),
        "{err}"
    );
}

#[test]
fn an_equal_explicit_value_is_fine() {
    let client = PlanRequest {
        qps: Some(4),
        ..request()
    }
    .resolve(WRITE_BW)
    .unwrap();
    let server = PlanRequest {
        qps: Some(4),
        ..request()
    };
    assert!(TestPlan::adopt(client, WRITE_BW, &server).is_ok());
}
