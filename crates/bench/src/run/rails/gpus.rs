//! Which GPU each rail's buffers live on when the memory is a GPU's (`--mem cuda*`): the GPU
//! nearest the rail's NIC on the PCIe tree (PIX before PXB, PHB, NODE, SYS, as
//! `nvidia-smi topo -m` ranks them), a GPU of its own where two rails are as near to one;
//! `--gpu-map` names them instead, and a `--mem` that names a GPU puts every rail on it.

use std::collections::BTreeMap;

use accel::DeviceSelector;
use topo::Topology;

use crate::memory::{GpuMem, MemMode};
use crate::plan::PlanError;

/// How the rails' GPUs are chosen.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum RailGpus {
    /// Each rail's nearest GPU (`--mem cuda` without a GPU).
    #[default]
    Nearest,
    /// The GPU `--mem` names, for every rail.
    AsGiven,
    /// `--gpu-map`: one GPU per rail, in rail order.
    Map(Vec<DeviceSelector>),
}

/// `--gpu-map`: one GPU per rail, in rail order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GpuMap(pub Vec<DeviceSelector>);

/// Parses `--gpu-map`: GPU indexes or PCI bus ids, comma-separated.
pub(crate) fn parse_gpu_map(text: &str) -> Result<GpuMap, String> {
    text.split(',')
        .map(|g| {
            g.parse::<DeviceSelector>().map_err(|_| {
                format!("--gpu-map {text}: '{g}' is not a GPU index or PCI bus id; give one per rail, as in --gpu-map 0,1 or --gpu-map 0000:19:00.0,0000:3b:00.0")
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(GpuMap)
}

/// The memory mode of each rail: `mem` itself for host memory and for a GPU `--mem` names;
/// else the map's or the nearest GPU.
pub(crate) fn rail_mems(
    mem: &MemMode,
    choice: &RailGpus,
    nics: &[String],
    topology: Option<&Topology>,
) -> Result<Vec<MemMode>, PlanError> {
    let same = || vec![mem.clone(); nics.len()];
    if *mem == MemMode::Host {
        return Ok(same());
    }
    let gpus = match choice {
        RailGpus::AsGiven => return Ok(same()),
        RailGpus::Map(map) if map.len() != nics.len() => {
            return Err(PlanError::Value(format!(
                "--gpu-map names {} GPU(s) for {} rail(s) ({}): give one per rail",
                map.len(),
                nics.len(),
                nics.join(",")
            )))
        }
        RailGpus::Map(map) => map.clone(),
        RailGpus::Nearest => match topology
            .zip(mem.gpu_mem())
            .map(|(t, g)| nearest(t, nics, g))
        {
            Some(Some(found)) => found,
            // No GPU on the PCIe tree next to these NICs (or no tree): --mem's GPU.
            _ => return Ok(same()),
        },
    };
    Ok(gpus.into_iter().map(|g| mem.on_gpu(g)).collect())
}

/// Each NIC's nearest GPU of `mem`'s runtime, a GPU of its own among equally near ones; `None`
/// when a NIC has no such GPU on the tree (a virtual NIC, a machine without GPUs).
fn nearest(topology: &Topology, nics: &[String], mem: &GpuMem) -> Option<Vec<DeviceSelector>> {
    let kind = mem.runtime.accelerator();
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for nic in nics {
        let best = crate::memory::nearest_accelerator(topology, nic, kind, &taken)?;
        *taken.entry(best.gpu.clone()).or_default() += 1;
        out.push(best.gpu.parse().ok()?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dgx() -> Topology {
        Topology::scan(&crate::sysroot::fixture("dgx-h100")).unwrap()
    }

    fn cuda(text: &str) -> MemMode {
        MemMode::parse(text).unwrap()
    }

    #[test]
    fn each_rail_gets_the_gpu_behind_its_own_switch() {
        let t = dgx();
        let nics: Vec<String> = t
            .nics
            .iter()
            .filter(|n| !n.is_virtual)
            .map(|n| n.name.clone())
            .collect();
        assert!(nics.len() >= 2, "{nics:?}");
        let mems = rail_mems(&cuda("cuda"), &RailGpus::Nearest, &nics, Some(&t)).unwrap();
        for (nic, mem) in nics.iter().zip(&mems) {
            let gpu = mem.gpu().unwrap().to_string();
            let pair = t
                .pairs
                .iter()
                .find(|p| &p.nic == nic && gpu.contains(&p.gpu))
                .unwrap();
            let best = t
                .pairs
                .iter()
                .filter(|p| &p.nic == nic)
                .map(|p| p.path.class)
                .min();
            assert_eq!(Some(pair.path.class), best, "{nic} -> {gpu}");
        }
        let mut distinct: Vec<String> = mems.iter().map(|m| m.gpu().unwrap().to_string()).collect();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), nics.len(), "a GPU of its own per rail");
    }

    #[test]
    fn a_named_gpu_a_map_and_host_memory_are_taken_as_given() {
        let t = dgx();
        let nics = vec!["mlx5_0".to_string(), "mlx5_1".to_string()];
        let given = rail_mems(&cuda("cuda:3"), &RailGpus::AsGiven, &nics, Some(&t)).unwrap();
        assert_eq!(given, vec![cuda("cuda:3"), cuda("cuda:3")]);
        let map = RailGpus::Map(parse_gpu_map("5,6").unwrap().0);
        let mapped = rail_mems(&cuda("cuda-staged"), &map, &nics, Some(&t)).unwrap();
        assert_eq!(mapped, vec![cuda("cuda-staged:5"), cuda("cuda-staged:6")]);
        let host = rail_mems(&MemMode::Host, &map, &nics, Some(&t)).unwrap();
        assert_eq!(host, vec![MemMode::Host, MemMode::Host]);
        let e = rail_mems(
            &cuda("cuda"),
            &RailGpus::Map(parse_gpu_map("5").unwrap().0),
            &nics,
            Some(&t),
        );
        assert!(e.unwrap_err().message().contains("1 GPU(s) for 2 rail(s)"));
        assert!(parse_gpu_map("0,x")
            .unwrap_err()
            .contains("'x' is not a GPU"));
    }

    #[test]
    fn without_a_gpu_on_the_tree_every_rail_keeps_mems_gpu() {
        let nics = vec!["rxe0".to_string(), "rxe1".to_string()];
        let mems = rail_mems(&cuda("cuda"), &RailGpus::Nearest, &nics, None).unwrap();
        assert_eq!(mems, vec![cuda("cuda"), cuda("cuda")]);
    }
}
