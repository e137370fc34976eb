#[test]
fn an_amd_gpu_is_judged_by_amdgpu_peer_direct_or_its_dma_buf_pieces() {
    use super::super::host::{AmdGdrFacts, ConfigFact};
    use crate::kconfig::RocmDmabufKernel;
    let config = |set: Option<bool>, source: &str| ConfigFact {
        set,
        source: source.to_string(),
    };
    let boot = "/boot/config-6.8.0-45-generic";
    let facts = |amd: AmdGdrFacts| GdrFacts {
        peermem: None,
        release: Some("6.8.0-45-generic".to_string()),
        config: config(Some(true), boot),
        driver: None,
        open_modules: None,
        amd,
    };
    let kernel = |m, p| RocmDmabufKernel {
        move_notify: config(m, boot),
        p2pdma: config(p, boot),
    };
    let ready = AmdGdrFacts {
        peer_direct: false,
        amdgpu: true,
        kernel: kernel(Some(true), Some(true)),
    };
    // The verdict on `amd`, and that its evidence holds `needle`.
    let judged = |amd: AmdGdrFacts, verdict: Verdict, needle: &str| {
        let c = gpudirect_for(topo::Accelerator::Amd, &facts(amd));
        assert_eq!(c.verdict, verdict, "{}", c.evidence);
        assert!(c.evidence.contains(needle), "{needle}: {}", c.evidence);
        c
    };
    judged(
        ready.clone(),
        Verdict::Pass,
        "MOVE_NOTIFY and CONFIG_PCI_P2PDMA set",
    );
    // PeerDirect is enough, whatever the kernel.
    let mut old = facts(AmdGdrFacts {
        peer_direct: true,
        ..AmdGdrFacts::default()
    });
    old.release = Some("5.4.0".to_string());
    let c = gpudirect_for(topo::Accelerator::Amd, &old);
    assert_eq!(c.verdict, Verdict::Pass, "{}", c.evidence);
    assert!(c.evidence.starts_with("amdgpu PeerDirect loaded"), "{c:?}");
    // No amdgpu: nothing exports; no PeerDirect either: a failure naming both ways.
    let no_amdgpu = AmdGdrFacts {
        amdgpu: false,
        ..ready.clone()
    };
    let c = judged(no_amdgpu, Verdict::Fail, "the amdgpu module is not loaded");
    let fix = c.fix.unwrap_or_default();
    assert!(
        fix.contains("amdgpu-dkms") && fix.contains("P2PDMA"),
        "{fix}"
    );
    // Without P2PDMA or move notification (a stock kernel's) the export moves the buffer
    // to system memory: a warning naming the option.
    for (move_notify, p2p, needle) in [(true, false, "P2PDMA is"), (false, true, "NOTIFY is")] {
        let amd = AmdGdrFacts {
            kernel: kernel(Some(move_notify), Some(p2p)),
            ..ready.clone()
        };
        let c = judged(amd, Verdict::Warn, &format!("{needle} not set"));
        assert!(c.evidence.contains("to system memory (GTT)"), "{c:?}");
    }
    // No kernel configuration to read: not confirmed.
    let unknown = AmdGdrFacts {
        kernel: kernel(None, None),
        ..ready
    };
    judged(unknown, Verdict::Warn, "unknown CONFIG_DMABUF_MOVE_NOTIFY");
    // NVIDIA's pieces are not asked of an AMD GPU, nor anything of a Gaudi.
    assert!(!gpudirect_for(topo::Accelerator::Amd, &old)
        .evidence
        .contains("nvidia"));
    let c = gpudirect_for(topo::Accelerator::Gaudi, &old);
    assert_eq!(c.verdict, Verdict::Skip, "{}", c.evidence);
}

#[test]
fn without_a_cuda_driver_the_gpu_attribute_is_skipped_with_the_reason() {
    if crate::memory::runtime_of(topo::Accelerator::Nvidia).is_some_and(|r| r.library_present()) {
        eprintln!("skipped: this machine has a CUDA driver");
        return;
    }
    let c = gpu_dmabuf_attribute("0000:19:00.0", topo::Accelerator::Nvidia, true);
    assert_eq!(c.verdict, Verdict::Skip);
    assert!(
        c.evidence.contains("CUDA cannot be asked") && c.evidence.contains("libcuda"),
        "{}",
        c.evidence
    );
    let c = gpu_dmabuf_attribute("0000:19:00.0", topo::Accelerator::Nvidia, false);
    assert!(c.evidence.contains("snapshot"), "{}", c.evidence);
}

use super::*;
use crate::doctor::verdict::Verdict;

#[test]
fn numa_verdicts() {
    let nodes: BTreeMap<u32, Vec<u32>> = [(0, (0..8).collect()), (1, (8..16).collect())]
        .into_iter()
        .collect();
    let check = |cpus: Vec<u32>| numa("mlx5_0", Some(0), &Cpus::Known(cpus, "given"), &nodes);
    assert_eq!(check((0..4).collect()).verdict, Verdict::Pass);
    assert_eq!(check((0..16).collect()).verdict, Verdict::Warn);
    let c = check((8..12).collect());
    assert_eq!(c.verdict, Verdict::Fail);
    assert!(c.fix.unwrap().contains("numactl --cpunodebind=0"));
    assert_eq!(
        numa("rxe0", None, &Cpus::Known(vec![0], "given"), &nodes).verdict,
        Verdict::Skip
    );
}

#[test]
fn governors() {
    let govs: BTreeMap<u32, String> =
        [(0, "performance".to_string()), (1, "powersave".to_string())]
            .into_iter()
            .collect();
    assert_eq!(governor(&govs, Some(&[0])).verdict, Verdict::Pass);
    let c = governor(&govs, None);
    assert_eq!(c.verdict, Verdict::Warn);
    assert!(c.evidence.contains("powersave on 1 CPU"), "{}", c.evidence);
    assert_eq!(governor(&BTreeMap::new(), None).verdict, Verdict::Skip);
}

#[test]
fn roce_mtu_from_the_netdev() {
    let sysfs = Sysfs::new(format!(
        "{}/../topo/tests/fixtures/two-socket",
        env!("CARGO_MANIFEST_DIR")
    ));
    let fact = mtu_fact(&sysfs, Some(LinkLayer::Ethernet), Some("ens2f0np0"), None);
    assert_eq!(fact.active, Some(4096));
    assert_eq!(fact.netdev, Some(("ens2f0np0".to_string(), 9000)));
    let fact = mtu_fact(&sysfs, Some(LinkLayer::Ethernet), Some("ens2f1np1"), None);
    assert_eq!(fact.active, Some(1024));
    let verbs = mtu_fact(&sysfs, Some(LinkLayer::InfiniBand), None, Some(Ok(2048)));
    assert_eq!(verbs.active, Some(2048));
    let gids = read_gids(&sysfs, "mlx5_0", 1);
    assert_eq!(gids.len(), 4);
    assert_eq!(gids[3].kind.as_deref(), Some("RoCE v2"));
    assert_eq!(
        gids[3].addr.to_ipv4_mapped(),
        Some([192, 168, 10, 11].into())
    );
}
