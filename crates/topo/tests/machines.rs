//! What a user of `rdmabench topo` and the ceilings would notice, on the fixture machines
//! under tests/fixtures/ (each one's README.md describes it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fixture;
use topo::{
    ceilings, find_gpu, list_accelerators, list_rdma_devices, pair_path, render, Attachment, Limit,
    PathClass, PciFunction, RdmaDevice, TopoError, Topology,
};

fn class(topo: &Topology, nic: &str, gpu: &str) -> PathClass {
    topo.pair(nic, gpu)
        .unwrap_or_else(|| panic!("no pair {nic} {gpu}"))
        .path
        .class
}

mod dgx_h100 {
    use super::*;

    #[test]
    fn nic_and_gpu_under_one_switch_are_pix_and_across_sockets_sys() {
        let topo = Topology::scan(&fixture("dgx-h100")).unwrap();
        assert_eq!(class(&topo, "mlx5_0", "0000:19:00.0"), PathClass::Pix);
        assert_eq!(class(&topo, "mlx5_1", "0000:9e:00.0"), PathClass::Pix);
        assert_eq!(class(&topo, "mlx5_0", "0000:9e:00.0"), PathClass::Sys);
        assert_eq!(class(&topo, "mlx5_1", "0000:19:00.0"), PathClass::Sys);
        let pix = topo.pair("mlx5_0", "00000000:19:00.0").unwrap();
        assert_eq!(pix.path.common_ancestor.as_deref(), Some("0000:16:00.0"));
        assert_eq!(pix.path.switches, 1);
        assert_eq!(pix.path.acs_redirect, Some(false));
    }

    #[test]
    fn nic_resolves_through_class_symlinks_to_its_pci_function() {
        let sysfs = fixture("dgx-h100");
        let nic = RdmaDevice::read(&sysfs, "mlx5_0").unwrap();
        assert_eq!(nic.bdf(), Some("0000:18:00.0"));
        assert_eq!(nic.netdevs, ["ibp24s0"]);
        assert_eq!(nic.numa_node, Some(0));
        assert_eq!(nic.fw_ver.as_deref(), Some("28.39.1002"));
        let pci = nic.pci.as_ref().unwrap();
        assert_eq!(pci.vendor, Some(0x15b3));
        assert_eq!(pci.class, Some(0x020700));
        assert_eq!(pci.driver.as_deref(), Some("mlx5_core"));
        assert_eq!(pci.iommu_type.as_deref(), Some("identity"));
        let port = nic.port(1).unwrap();
        assert_eq!(port.rate.as_deref(), Some("400 Gb/sec (4X NDR)"));
        assert_eq!(port.link_layer.as_deref(), Some("InfiniBand"));
        assert!(port.is_active());
        let second = RdmaDevice::read(&sysfs, "mlx5_1").unwrap();
        assert_eq!(second.numa_node, Some(1));
    }

    #[test]
    fn links_are_gen5_x16_with_mps_256_read_from_config() {
        let sysfs = fixture("dgx-h100");
        let gpu = find_gpu(&sysfs, "00000000:19:00.0").unwrap();
        assert_eq!(gpu.link.speed_gts, Some(32.0));
        assert_eq!(gpu.link.width, Some(16));
        assert_eq!(gpu.link.mps, Some(256));
        assert_eq!(gpu.link.mrrs, Some(512));
        assert_eq!(gpu.link.to_string(), "Gen5 x16 (max Gen5 x16) MPS 256");
        assert!(!gpu.link.is_downtrained());
        let nic = PciFunction::read(&sysfs, "18:00.0").unwrap();
        assert_eq!(nic.link.mrrs, Some(4096));
    }

    #[test]
    fn ndr_behind_gen5_is_wire_bound() {
        let sysfs = fixture("dgx-h100");
        let nic = RdmaDevice::read(&sysfs, "mlx5_0").unwrap();
        let wire = nic.port(1).unwrap().wire(4096).unwrap();
        let pcie = nic.pci.unwrap().link.pcie().unwrap();
        let c = ceilings(&wire, &pcie, None);
        assert_eq!(c.limit, Limit::Wire);
        assert!((49.0..50.0).contains(&c.wire_gbps), "{c:?}");
        assert!((51.0..53.0).contains(&c.pcie_gbps), "{c:?}");
    }

    #[test]
    fn staged_run_through_the_shared_switch_uplink() {
        let sysfs = fixture("dgx-h100");
        let nic = RdmaDevice::read(&sysfs, "mlx5_0").unwrap();
        let nic_pci = nic.pci.as_ref().unwrap();
        let gpu = find_gpu(&sysfs, "0000:19:00.0").unwrap();
        let pair = pair_path(&sysfs, nic_pci, &gpu).unwrap();
        assert_eq!(pair.class, PathClass::Pix);
        let shared = pair.shared_pcie().unwrap();
        assert_eq!((shared.gen, shared.width, shared.mps), (5, 16, 256));
        // One-way: the uplink carries the copy and the DMA in opposite directions.
        let one_way = pair.staged(&gpu.link, false).unwrap();
        assert_eq!(one_way.shared, None);
        // Bidirectional: the uplink carries each byte twice per direction.
        let staged = pair.staged(&gpu.link, true).unwrap();
        assert_eq!(staged.shared, Some(shared));
        let wire = nic.port(1).unwrap().wire(4096).unwrap();
        let c = ceilings(&wire, &nic_pci.link.pcie().unwrap(), Some(&staged));
        assert_eq!(c.limit, Limit::Staged);
        assert!((25.5..26.5).contains(&c.limit_gbps), "{c:?}");
    }

    #[test]
    fn nvswitch_is_not_a_gpu() {
        let gpus = list_accelerators(&fixture("dgx-h100")).unwrap();
        let bdfs: Vec<&str> = gpus.iter().map(|(g, _)| g.bdf.as_str()).collect();
        assert_eq!(bdfs, ["0000:19:00.0", "0000:9e:00.0"]);
    }

    #[test]
    fn iommu_in_passthrough() {
        let topo = Topology::scan(&fixture("dgx-h100")).unwrap();
        assert!(topo.iommu.enabled);
        assert_eq!(topo.iommu.units, ["dmar0", "dmar1"]);
        assert_eq!(topo.iommu.group_types, ["identity"]);
        assert_eq!(topo.iommu.cmdline, ["intel_iommu=on", "iommu=pt"]);
    }

    #[test]
    fn json_has_nics_gpus_and_pairs() {
        let topo = Topology::scan(&fixture("dgx-h100")).unwrap();
        let json = serde_json::to_value(&topo).unwrap();
        let nic = &json["nics"][0];
        assert_eq!(nic["name"], "mlx5_0");
        assert_eq!(nic["bdf"], "0000:18:00.0");
        assert_eq!(nic["numa_node"], 0);
        assert_eq!(nic["virtual"], false);
        assert_eq!(nic["link"]["speed_gts"], 32.0);
        assert_eq!(nic["link"]["width"], 16);
        assert_eq!(nic["link"]["max_speed_gts"], 32.0);
        assert_eq!(nic["link"]["max_width"], 16);
        assert_eq!(nic["link"]["mps"], 256);
        let gpu = &json["gpus"][1];
        assert_eq!(gpu["bdf"], "0000:9e:00.0");
        assert_eq!(gpu["numa_node"], 1);
        assert_eq!(gpu["link"]["mps"], 256);
        let pair = &json["pairs"][0];
        assert_eq!(pair["nic"], "mlx5_0");
        assert_eq!(pair["gpu"], "0000:19:00.0");
        assert_eq!(pair["class"], "PIX");
        let back: Topology = serde_json::from_value(json).unwrap();
        assert_eq!(back, topo);
    }

    #[test]
    fn tree_shows_switch_nic_gpu_and_class() {
        let text = render(&Topology::scan(&fixture("dgx-h100")).unwrap());
        for needle in [
            "pci0000:15 (host bridge, NUMA 0)",
            "└─ 0000:15:01.0 root port  Gen5 x16 (max Gen5 x16) MPS 256",
            "0000:16:00.0 switch upstream port",
            "├─ 0000:17:00.0 switch downstream port",
            "0000:18:00.0 NIC mlx5_0 (ibp24s0)  port 1: 400 Gb/sec (4X NDR) InfiniBand ACTIVE",
            "0000:19:00.0 GPU 10de:2330  Gen5 x16 (max Gen5 x16) MPS 256",
            "mlx5_0  0000:19:00.0  PIX   via 0000:16:00.0, 1 switch\n",
            "PIX  = at most one PCIe switch",
            "IOMMU on: dmar0, dmar1",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        assert!(!text.contains("DOWNTRAINED"), "{text}");
    }
}

mod two_socket {
    use super::*;

    #[test]
    fn gpu_on_the_other_socket_is_sys_and_on_another_host_bridge_node() {
        let topo = Topology::scan(&fixture("two-socket")).unwrap();
        assert_eq!(class(&topo, "mlx5_0", "0000:cb:00.0"), PathClass::Sys);
        assert_eq!(class(&topo, "mlx5_0", "0000:4b:00.0"), PathClass::Node);
        let sys = topo.pair("mlx5_0", "0000:cb:00.0").unwrap();
        assert_eq!(sys.path.common_ancestor, None);
        let route: Vec<&str> = sys.path.route.iter().map(|h| h.bdf.as_str()).collect();
        assert_eq!(route, ["0000:17:02.0", "0000:ca:02.0"]);
    }

    #[test]
    fn roce_port_and_its_netdev() {
        let nic = RdmaDevice::read(&fixture("two-socket"), "mlx5_0").unwrap();
        assert_eq!(nic.netdevs, ["ens2f0np0"]);
        let port = nic.port(1).unwrap();
        assert_eq!(port.netdevs, ["ens2f0np0"]);
        assert_eq!(port.layer(), Some(topo::LinkLayer::Ethernet));
        let wire = port.wire(4096).unwrap();
        let c = ceilings(&wire, &nic.pci.unwrap().link.pcie().unwrap(), None);
        // 100 GbE: 12.5 GB/s x 4096/4178 of payload, well below Gen4 x16.
        assert_eq!(c.limit, Limit::Wire);
        assert!((c.wire_gbps - 12.5 * 4096.0 / 4178.0).abs() < 1e-9);
    }

    #[test]
    fn a_down_port_without_rate_is_reported_not_an_error() {
        let nic = RdmaDevice::read(&fixture("two-socket"), "mlx5_1").unwrap();
        let port = nic.port(1).unwrap();
        assert_eq!(port.rate, None);
        assert!(!port.is_active());
        assert_eq!(port.wire(4096), None);
    }

    #[test]
    fn acs_redirect_and_translating_iommu() {
        let sysfs = fixture("two-socket");
        let root_port = PciFunction::read(&sysfs, "0000:17:02.0").unwrap();
        let topo::Acs::Control(acs) = root_port.acs else {
            panic!("no ACS read: {:?}", root_port.acs);
        };
        assert!(acs.request_redirect && acs.completion_redirect && acs.source_validation);
        let topo = Topology::scan(&sysfs).unwrap();
        assert_eq!(
            topo.pair("mlx5_0", "0000:4b:00.0")
                .unwrap()
                .path
                .acs_redirect,
            Some(true)
        );
        assert_eq!(topo.iommu.group_types, ["DMA-FQ"]);
        assert!(topo
            .iommu
            .describe()
            .starts_with("IOMMU on: dmar0, dmar1, dmar2, dmar3"));
    }

    #[test]
    fn mid_era_speed_string_parses() {
        // This fixture's kernel writes "16.0 GT/s" without "PCIe".
        let gpu = find_gpu(&fixture("two-socket"), "0000:cb:00.0").unwrap();
        assert_eq!(gpu.link.speed_gts, Some(16.0));
        assert_eq!(gpu.numa_node, Some(1));
    }
}

mod downtrained {
    use super::*;

    #[test]
    fn nic_trained_gen3_x8_of_gen4_x16_is_flagged() {
        let nic = RdmaDevice::read(&fixture("downtrained"), "mlx5_0").unwrap();
        let link = nic.pci.unwrap().link;
        assert!(link.is_downtrained());
        assert_eq!(link.gen(), Some(3));
        assert_eq!(link.width, Some(8));
        assert_eq!(link.max_gen(), Some(4));
        assert_eq!(link.max_width, Some(16));
        assert_eq!(
            link.downtrain_note().as_deref(),
            Some("DOWNTRAINED: running Gen3 x8, capable of Gen4 x16")
        );
    }

    #[test]
    fn tree_marks_the_downtrained_link() {
        let text = render(&Topology::scan(&fixture("downtrained")).unwrap());
        let nic_line = text
            .lines()
            .find(|l| l.contains("NIC mlx5_0"))
            .expect("no NIC line");
        assert!(
            nic_line.ends_with(
                "Gen3 x8 (max Gen4 x16) MPS 512  <-- DOWNTRAINED: running Gen3 x8, capable of Gen4 x16"
            ),
            "{nic_line}"
        );
        let gpu_line = text
            .lines()
            .find(|l| l.contains("GPU"))
            .expect("no GPU line");
        assert!(!gpu_line.contains("DOWNTRAINED"), "{gpu_line}");
    }

    #[test]
    fn downtrained_hdr_nic_is_pcie_bound() {
        let nic = RdmaDevice::read(&fixture("downtrained"), "mlx5_0").unwrap();
        let wire = nic.port(1).unwrap().wire(4096).unwrap();
        let pcie = nic.pci.unwrap().link.pcie().unwrap();
        assert_eq!(pcie.mps, 512);
        let c = ceilings(&wire, &pcie, None);
        assert_eq!(c.limit, Limit::Pcie);
        assert!(c.pcie_gbps < 7.5 && c.wire_gbps > 24.0, "{c:?}");
    }

    #[test]
    fn gpu_on_another_root_port_of_the_same_host_bridge_is_phb() {
        let topo = Topology::scan(&fixture("downtrained")).unwrap();
        // A VGA-class (0x0300) NVIDIA GPU is listed as well as 3D controllers.
        assert_eq!(topo.gpus.len(), 1);
        assert_eq!(class(&topo, "mlx5_0", "0000:42:00.0"), PathClass::Phb);
        assert!(!topo.iommu.enabled);
    }
}

mod old_kernel {
    use super::*;

    #[test]
    fn old_speed_strings_parse() {
        let sysfs = fixture("old-kernel");
        let nic = PciFunction::read(&sysfs, "0000:07:00.0").unwrap();
        assert_eq!(nic.link.speed_gts, Some(8.0));
        assert_eq!(nic.link.gen(), Some(3));
        assert_eq!(nic.link.width, Some(16));
        let eth = PciFunction::read(&sysfs, "0000:01:00.0").unwrap();
        assert_eq!(eth.link.speed_gts, Some(5.0));
        let bmc_port = PciFunction::read(&sysfs, "0000:00:1c.7").unwrap();
        assert_eq!(bmc_port.link.speed_gts, Some(2.5));
        // An empty slot: "Unknown speed" and width 0.
        let empty = PciFunction::read(&sysfs, "0000:00:03.0").unwrap();
        assert_eq!((empty.link.speed_gts, empty.link.width), (None, None));
        assert_eq!(empty.link.max_speed_gts, Some(8.0));
    }

    #[test]
    fn unprivileged_config_leaves_mps_unknown_not_guessed() {
        let sysfs = fixture("old-kernel");
        let nic = RdmaDevice::read(&sysfs, "mlx5_0").unwrap();
        let link = nic.pci.unwrap().link;
        assert_eq!(link.mps, None);
        assert_eq!(link.mrrs, None);
        assert_eq!(link.pcie(), None);
        assert_eq!(link.to_string(), "Gen3 x16 (max Gen3 x16) MPS ?");
    }

    #[test]
    fn cascaded_plx_switches_are_pxb() {
        let topo = Topology::scan(&fixture("old-kernel")).unwrap();
        let pair = topo.pair("mlx5_0", "0000:06:00.0").unwrap();
        assert_eq!(pair.path.class, PathClass::Pxb);
        assert_eq!(pair.path.switches, 2);
        assert_eq!(pair.path.acs_redirect, None);
        // The BMC's VGA is a GPU class, but not NVIDIA's.
        assert_eq!(topo.gpus.len(), 1);
        let text = render(&topo);
        assert!(
            text.contains("2 switches; ACS unknown (run as root"),
            "{text}"
        );
    }

    #[test]
    fn old_style_rxe_on_a_pci_nic_is_still_virtual() {
        let rxe = RdmaDevice::read(&fixture("old-kernel"), "rxe0").unwrap();
        assert!(rxe.is_virtual());
        assert!(rxe.pci.is_none());
        assert_eq!(rxe.netdevs, ["enp1s0f0"]);
        assert!(rxe
            .describe_attachment()
            .starts_with("virtual, no PCI function"));
    }
}

mod rxe_vm {
    use super::*;

    #[test]
    fn rxe_is_reported_as_virtual_not_an_error() {
        let rxe = RdmaDevice::read(&fixture("rxe-vm"), "rxe0").unwrap();
        assert!(rxe.is_virtual());
        assert_eq!(rxe.bdf(), None);
        assert_eq!(rxe.numa_node, None);
        assert_eq!(rxe.netdevs, ["eth0"]);
        assert_eq!(
            rxe.describe_attachment(),
            "virtual, no PCI function (over eth0; no device link, so a software device such as rxe or siw)"
        );
        let port = rxe.port(1).unwrap();
        assert_eq!(port.link_layer.as_deref(), Some("Ethernet"));
        assert!(port.is_active());
    }

    #[test]
    fn siw_below_a_virtio_device_is_virtual() {
        let siw = RdmaDevice::read(&fixture("rxe-vm"), "siw0").unwrap();
        let Attachment::Virtual { reason } = &siw.attachment else {
            panic!("siw0 taken for PCI: {:?}", siw.attachment);
        };
        assert!(
            reason.contains("/sys/devices/pci0000:00/0000:00:03.0/virtio0"),
            "{reason}"
        );
        assert_eq!(siw.netdevs, ["eth0"]);
        assert_eq!(siw.node_type.as_deref(), Some("4: RNIC"));
    }

    #[test]
    fn the_whole_vm_scans_and_renders() {
        let topo = Topology::scan(&fixture("rxe-vm")).unwrap();
        assert_eq!(topo.nics.len(), 2);
        assert!(topo.nics.iter().all(|n| n.is_virtual && n.link.is_none()));
        assert!(topo.gpus.is_empty() && topo.pairs.is_empty());
        let text = render(&topo);
        assert!(
            text.contains("virtual RDMA devices:\n  rxe0  virtual, no PCI function"),
            "{text}"
        );
        assert!(
            text.contains("no GPUs or other accelerators found"),
            "{text}"
        );
    }

    #[test]
    fn conventional_pci_virtio_has_no_link() {
        let virtio = PciFunction::read(&fixture("rxe-vm"), "0000:00:03.0").unwrap();
        assert_eq!(virtio.link, topo::PciLink::default());
        assert_eq!(virtio.numa_node, None);
        assert_eq!(virtio.port_type, None);
        assert_eq!(virtio.driver.as_deref(), Some("virtio-pci"));
    }
}

mod errors {
    use super::*;

    #[test]
    fn unknown_device_names_the_ones_present() {
        let err = RdmaDevice::read(&fixture("dgx-h100"), "mlx5_9").unwrap_err();
        assert!(matches!(err, TopoError::NoRdmaDevice { .. }));
        let text = err.to_string();
        assert!(text.contains("\"mlx5_9\""), "{text}");
        assert!(text.contains("present: mlx5_0, mlx5_1"), "{text}");
    }

    #[test]
    fn unknown_gpu_names_the_address_and_how_to_list() {
        let err = find_gpu(&fixture("dgx-h100"), "0000:aa:00.0")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("0000:aa:00.0") && err.contains("lspci -D"),
            "{err}"
        );
        let err = find_gpu(&fixture("dgx-h100"), "gpu0")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"gpu0\"") && err.contains("0000:17:00.0"),
            "{err}"
        );
    }

    #[test]
    fn a_root_without_sysfs_has_no_devices() {
        let empty = fixture("no-such-fixture");
        assert!(list_rdma_devices(&empty).unwrap().is_empty());
        let topo = Topology::scan(&empty).unwrap();
        assert!(topo.nics.is_empty() && topo.gpus.is_empty());
        assert!(!topo.iommu.enabled);
        assert!(render(&topo).contains("no RDMA devices found"));
    }
}
