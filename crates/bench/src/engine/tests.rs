use super::*;
use crate::engine::checks::check_outs;

#[test]
fn tclass_without_a_grh_is_refused_naming_x() {
    let plan = |tclass| {
        crate::plan::PlanRequest {
            tclass,
            ..Default::default()
        }
        .resolve(crate::plan::TestKind::ALL[0])
        .unwrap()
    };
    let err = check_tclass(&plan(Some(106)), false).unwrap_err();
    assert!(matches!(err, PlanError::Device(_)), "{err:?}");
    let e = err.message().to_string();
    assert!(e.starts_with("--tclass 106 is a field of the GRH"), "{e}");
    assert!(e.contains("give -x GID_INDEX"), "{e}");
    assert!(check_tclass(&plan(Some(106)), true).is_ok());
    assert!(check_tclass(&plan(None), false).is_ok());
}

#[test]
fn outs_above_the_devices_limit_names_the_limit_as_a_range() {
    let facts = verbs::DeviceFacts {
        name: "rxe0".into(),
        fw_ver: String::new(),
        vendor_id: 0,
        part_id: 0,
        port_count: 1,
        max_qp_wr: 1 << 14,
        max_cqe: 1 << 16,
        max_qp_rd_atom: 128,
        max_qp_init_rd_atom: 16,
        max_mr_size: u64::MAX,
        ..verbs::DeviceFacts::default()
    };
    let plan = |outs| {
        crate::plan::PlanRequest {
            outs: Some(outs),
            ..Default::default()
        }
        .resolve(crate::plan::TestKind::new(Verb::Read, Mode::Bw))
        .unwrap()
    };
    assert!(check_outs(&plan(16), &facts).is_ok());
    assert_eq!(
        check_outs(&plan(200), &facts).unwrap_err().message(),
        "--outs 200 exceeds rxe0's limit of 16 outstanding READs/atomics per QP: give \
         --outs 1 to 16, or leave it out"
    );
    assert_eq!(
        check_outs(&plan(1000), &facts).unwrap_err().message(),
        "--outs 1000 exceeds rxe0's limit of 16 outstanding READs/atomics per QP: give \
         --outs 1 to 16, or leave it out"
    );
}

#[test]
fn the_inline_limit_is_found_by_bisection() {
    assert_eq!(max_inline(|n| n <= 400), Some(400));
    assert_eq!(max_inline(|n| n <= 220), Some(220));
    assert_eq!(max_inline(|_| false), None);
    assert_eq!(max_inline(|n| n == 0), Some(0));
}

#[test]
fn a_ud_message_above_the_path_mtu_is_refused_naming_what_fits() {
    use crate::plan::{PlanRequest, TestKind};
    let plan = |size: Option<u64>, all: bool| {
        PlanRequest {
            size,
            all,
            connection: Some(Connection::Ud),
            ..Default::default()
        }
        .resolve(TestKind::new(Verb::Send, Mode::Bw))
        .unwrap()
    };
    assert!(check_ud_size(&plan(Some(1024), false), 1024, "rxe0's port 1").is_ok());
    let err = check_ud_size(&plan(Some(4096), false), 1024, "rxe0's port 1").unwrap_err();
    assert_eq!(
        err.message(),
        "-c UD sends one packet per message: -s 4096 exceeds the path MTU of 1024 bytes \
         (rxe0's port 1); give -s 1024 or less, or -c RC"
    );
    let err = check_ud_size(&plan(None, true), 4096, "-m 4096").unwrap_err();
    assert!(
        err.message().contains("the sweep's 8388608-byte messages"),
        "{err}"
    );
    // A refusal, so the process exits 2 (usage), not 1 (a failed run).
    let exit = crate::exit::Exit::of(&err.into());
    assert_eq!(exit, crate::exit::Exit::Usage);
}
