//! What a server's rails take together: one client's rails must ask for the same plan, and
//! the memory of all of them must fit the server's limits (`--max-mem`, or half of the
//! machine's memory; GPU memory per GPU). Each rail's own check is not enough: N rails
//! each under the limit pin N times it. Every rail computes the same answer from the same
//! figures, so all of them refuse together, before any allocates.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::engine::buffer::Footprint;
use crate::memory::MemMode;
use crate::plan::TestPlan;
use crate::run::admission::{host_memory, Admission, Cap, Refused};
use crate::units::format_size_approx;

/// Where one rail's buffers live, and the size of its GPU's memory.
#[derive(Debug, Clone)]
pub(crate) struct RailMem {
    /// The rail's `--mem`.
    pub mem: MemMode,
    /// Its staging (bounce buffers) for `cuda-staged`.
    pub staging: accel::StagingConfig,
    /// Its GPU's memory in bytes, where it has one.
    pub gpu_total: Option<u64>,
}

/// The rails' memory and the plan the first of them admitted.
#[derive(Debug, Default)]
pub(crate) struct RailBudget {
    state: Mutex<Budget>,
}

#[derive(Debug, Default)]
struct Budget {
    rails: Vec<Option<RailMem>>,
    plan: Option<(usize, TestPlan)>,
}

impl RailBudget {
    /// The budget of `count` rails, none registered yet.
    pub(crate) fn new(count: usize) -> Self {
        RailBudget {
            state: Mutex::new(Budget {
                rails: vec![None; count],
                plan: None,
            }),
        }
    }

    /// Rail `rail`'s memory, once its side is open.
    pub(crate) fn register(&self, rail: usize, mem: RailMem) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = s.rails.get_mut(rail) {
            *slot = Some(mem);
        }
    }

    /// Rail `rail` adopted `plan`: refused when it differs from another rail's, or when all
    /// rails' buffers together exceed the limits.
    pub(crate) fn admit(
        &self,
        rail: usize,
        plan: &TestPlan,
        admission: &Admission,
    ) -> Result<(), Refused> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &s.plan {
            Some((first, theirs)) if theirs != plan => {
                return Err(Refused(format!(
                    "rail {rail} asked for another plan than rail {first}: a multi-rail run \
                     runs the same plan on every rail"
                )))
            }
            Some(_) => {}
            None => s.plan = Some((rail, plan.clone())),
        }
        let rails: Vec<RailMem> = s.rails.iter().flatten().cloned().collect();
        drop(s);
        check_together(plan, &rails, admission)
    }
}

/// Checks the buffers of `plan` on every one of `rails` together: host memory summed over
/// all of them, GPU memory per GPU.
fn check_together(
    plan: &TestPlan,
    rails: &[RailMem],
    admission: &Admission,
) -> Result<(), Refused> {
    let n = rails.len();
    let mut host = 0u64;
    let mut gpus: BTreeMap<String, (u64, Option<u64>, usize)> = BTreeMap::new();
    for r in rails {
        let need =
            Footprint::new(plan, &r.mem, r.staging).map_err(|e| Refused(format!("{e:#}")))?;
        host = host.saturating_add(need.host_bytes());
        if let Some(gpu) = r.mem.gpu().filter(|_| need.gpu_bytes() > 0) {
            let entry = gpus.entry(gpu.to_string()).or_insert((0, r.gpu_total, 0));
            entry.0 = entry.0.saturating_add(need.gpu_bytes());
            entry.2 += 1;
        }
    }
    let caps = admission.caps(host_memory(), None);
    over(
        host,
        "host memory",
        &format!("its {n} rails together"),
        caps.host.as_ref(),
    )?;
    for (gpu, (bytes, total, count)) in gpus {
        let cap = admission.caps(None, total).gpu;
        let whose = format!("the {count} rails on GPU {gpu} together");
        over(bytes, "GPU memory", &whose, cap.as_ref())?;
    }
    Ok(())
}

fn over(bytes: u64, kind: &str, whose: &str, cap: Option<&Cap>) -> Result<(), Refused> {
    match cap {
        Some(cap) if bytes > cap.bytes => Err(Refused(format!(
            "the client's plan needs {} of {kind} on {whose}, above this server's {}",
            format_size_approx(bytes),
            cap.name
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Mode, PlanRequest, TestKind, Verb};

    fn plan(size: u64) -> TestPlan {
        PlanRequest {
            size: Some(size),
            ..Default::default()
        }
        .resolve(TestKind::new(Verb::Write, Mode::Bw))
        .unwrap()
    }

    fn budget(mems: &[&str], gpu_total: Option<u64>) -> RailBudget {
        let b = RailBudget::new(mems.len());
        for (k, m) in mems.iter().enumerate() {
            let mem = RailMem {
                mem: MemMode::parse(m).unwrap(),
                staging: accel::StagingConfig::default(),
                gpu_total,
            };
            b.register(k, mem);
        }
        b
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn two_rails_each_under_max_mem_but_over_it_together_are_refused() {
        let admission = Admission {
            max_mem: Some(48 * MIB),
            ..Default::default()
        };
        // 16 MiB messages: a 32 MiB slot per rail, each under 48 MiB, 64 MiB together.
        let p = plan(16 * MIB);
        let b = budget(&["host", "host"], None);
        let text = b.admit(0, &p, &admission).unwrap_err().to_string();
        assert!(
            text.contains(
                "of host memory on its 2 rails together, above this server's --max-mem 48 MiB"
            ),
            "{text}"
        );
        assert_eq!(b.admit(1, &p, &admission).unwrap_err().to_string(), text);
        // One rail alone fits.
        assert!(budget(&["host"], None).admit(0, &p, &admission).is_ok());
    }

    #[test]
    fn gpu_memory_is_counted_per_gpu() {
        let admission = Admission::default();
        let p = plan(256 * MIB);
        // 512 MiB a rail: two on one GPU of 1.5 GiB exceed half of it, one on each fit.
        let gpu = Some(1536 * MIB);
        let text = budget(&["cuda:0", "cuda:0"], gpu)
            .admit(0, &p, &admission)
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("GPU memory on the 2 rails on GPU 0 together"),
            "{text}"
        );
        assert!(budget(&["cuda:0", "cuda:1"], gpu)
            .admit(0, &p, &admission)
            .is_ok());
    }

    #[test]
    fn the_rails_plans_must_agree() {
        let admission = Admission::default();
        let b = budget(&["host", "host"], None);
        assert!(b.admit(1, &plan(4096), &admission).is_ok());
        let text = b.admit(0, &plan(8192), &admission).unwrap_err().to_string();
        assert!(
            text.contains("rail 0 asked for another plan than rail 1"),
            "{text}"
        );
        assert!(b.admit(0, &plan(4096), &admission).is_ok());
    }
}
