//! In the soft-RoCE guest: registering something that is not a GPU dma-buf (rxe has no
//! dma-buf support at all) is a clean error that says what to use instead.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::AsRawFd;

use verbs::{Access, Device, DmaBufRegistration, MemoryRegion, VerbsError};

#[test]
fn a_non_dmabuf_fd_is_refused_with_what_to_use_instead() {
    let device = match Device::open(Some("rxe0")) {
        Ok(d) => d,
        Err(e) => {
            if std::env::var("RDMABENCH_REQUIRE_RDMA").as_deref() == Ok("1") {
                panic!("RDMABENCH_REQUIRE_RDMA=1 but rxe0 cannot be opened: {e}");
            }
            eprintln!("skipped: needs the soft-RoCE device rxe0 (scripts/rxe-vm.sh): {e}");
            return;
        }
    };
    let pd = device.alloc_pd().unwrap();
    // A plain file descriptor, not a dma-buf: what a wrong fd or a driver without dma-buf gives.
    let file = std::fs::File::open("/dev/zero").unwrap();
    // SAFETY: the registration is expected to fail; nothing is accessed through it.
    let err = unsafe {
        MemoryRegion::register_dmabuf(
            &pd,
            file.as_raw_fd(),
            0,
            65536,
            0x1000_0000,
            Access::ALL,
            DmaBufRegistration::Verbs,
            (),
        )
    }
    .expect_err("rxe cannot register a dma-buf");
    assert!(matches!(err, VerbsError::DmaBufUnsupported { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("dma-buf") && text.contains("cuda-peermem") && text.contains("cuda-staged"),
        "{text}"
    );
}
