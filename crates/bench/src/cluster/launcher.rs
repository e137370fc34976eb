//! Who this process is in a launched job: its rank, the world's size, its rank on its node,
//! and where rank 0 (the coordinator) listens, from the launcher's environment. Read from a
//! lookup function, so every launcher's variables are tested without setting the process's.

use thiserror::Error;

use super::hostlist;

/// The launchers recognised, in the order they are looked for: a more specific launcher
/// first (`mpirun` inside a Slurm allocation sets `OMPI_*` per rank while the `SLURM_*`
/// variables describe the allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// Open MPI's `mpirun`: `OMPI_COMM_WORLD_RANK`, `_SIZE`, `_LOCAL_RANK`.
    OpenMpi,
    /// A PMI launcher (MPICH's hydra, `srun --mpi=pmi2`): `PMI_RANK`, `PMI_SIZE`.
    Pmi,
    /// torchrun and other `RANK`/`WORLD_SIZE`/`LOCAL_RANK` launchers.
    Torchrun,
    /// Slurm's `srun`: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`.
    Slurm,
}

impl Launcher {
    /// The launcher's name as printed.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Launcher::OpenMpi => "Open MPI (mpirun)",
            Launcher::Pmi => "PMI",
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "Slurm (srun)",
        }
    }

    /// The variables for rank, size and local rank.
    fn vars(self) -> [&'static str; 3] {
        match self {
            Launcher::OpenMpi => [
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
            ],
            Launcher::Pmi => ["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"],
            Launcher::Torchrun => ["RANK", "WORLD_SIZE", "LOCAL_RANK"],
            Launcher::Slurm => ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"],
        }
    }
}

/// The most ranks a sweep takes: above the 100,000 ranks its plan and rank 0 were measured
/// at (docs/cluster.md's scale table), within one host's open files (rank 0 holds a
/// connection per rank). A larger world is refused before anything is sized by it.
pub(crate) const MAX_WORLD_SIZE: usize = super::hostlist::MAX_HOSTS;

/// This process's place in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The launcher it was found through.
    pub launcher: Launcher,
    /// Its rank, 0..size.
    pub rank: usize,
    /// How many ranks.
    pub size: usize,
    /// Its rank among those on its node (0 when the launcher does not say).
    pub local_rank: usize,
}

/// Where rank 0 listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinator {
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Where it came from, for `--dry-run`.
    pub source: &'static str,
}

/// The environment does not say where this process stands.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum LaunchError {
    /// No launcher's variables.
    #[error(
        "no launcher found: run under srun, mpirun or torchrun (none of SLURM_PROCID, \
         OMPI_COMM_WORLD_RANK, PMI_RANK, RANK is set)"
    )]
    NoLauncher,
    /// A variable that is not a number, or a rank outside the world.
    #[error("{var}={value} is not valid: {why}")]
    Bad {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// Why.
        why: String,
    },
    /// Nothing names the coordinator.
    #[error(
        "no coordinator: set MASTER_ADDR and MASTER_PORT, run inside a Slurm job \
         (SLURM_JOB_NODELIST), or give --coordinator HOST:PORT (under mpirun: the host rank 0 \
         runs on, the first of -H or the hostfile, and a free port)"
    )]
    NoCoordinator,
}

/// Finds this process's rank and size from the first launcher whose variables are set.
pub(crate) fn place(env: &dyn Fn(&str) -> Option<String>) -> Result<Place, LaunchError> {
    for launcher in [
        Launcher::OpenMpi,
        Launcher::Pmi,
        Launcher::Torchrun,
        Launcher::Slurm,
    ] {
        let [rank_var, size_var, local_var] = launcher.vars();
        let (Some(rank), Some(size)) = (env(rank_var), env(size_var)) else {
            continue;
        };
        let rank = number(rank_var, &rank)?;
        let size = number(size_var, &size)?;
        if size > MAX_WORLD_SIZE {
            return Err(LaunchError::Bad {
                var: size_var,
                value: size.to_string(),
                why: format!("a sweep takes at most {MAX_WORLD_SIZE} ranks"),
            });
        }
        if size == 0 || rank >= size {
            return Err(LaunchError::Bad {
                var: rank_var,
                value: rank.to_string(),
                why: format!("the rank must be below {size_var}={size}"),
            });
        }
        let local_rank = match env(local_var) {
            Some(v) => number(local_var, &v)?,
            None => 0,
        };
        return Ok(Place {
            launcher,
            rank,
            size,
            local_rank,
        });
    }
    Err(LaunchError::NoLauncher)
}

fn number(var: &'static str, value: &str) -> Result<usize, LaunchError> {
    value.trim().parse().map_err(|_| LaunchError::Bad {
        var,
        value: value.to_string(),
        why: "not a whole number".to_string(),
    })
}

/// Where rank 0 listens: `--coordinator` when given (an explicit choice wins), else
/// `MASTER_ADDR`/`MASTER_PORT`, else the first host of the Slurm job's node list on
/// `default_port`.
pub(crate) fn coordinator(
    given: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    default_port: u16,
) -> Result<Coordinator, LaunchError> {
    let port_of = |var: &'static str, v: &str| {
        v.trim().parse::<u16>().map_err(|_| LaunchError::Bad {
            var,
            value: v.to_string(),
            why: "not a port (1-65535)".to_string(),
        })
    };
    if let Some(g) = given {
        let (host, port) = g.rsplit_once(':').ok_or_else(|| LaunchError::Bad {
            var: "--coordinator",
            value: g.to_string(),
            why: "give HOST:PORT".to_string(),
        })?;
        return Ok(Coordinator {
            host: host.trim_matches(['[', ']']).to_string(),
            port: port_of("--coordinator", port)?,
            source: "--coordinator",
        });
    }
    if let Some(host) = env("MASTER_ADDR") {
        let port = match env("MASTER_PORT") {
            Some(p) => port_of("MASTER_PORT", &p)?,
            None => default_port,
        };
        return Ok(Coordinator {
            host,
            port,
            source: "MASTER_ADDR/MASTER_PORT",
        });
    }
    for var in ["SLURM_JOB_NODELIST", "SLURM_NODELIST"] {
        if let Some(list) = env(var) {
            let first = hostlist::first(&list).map_err(|e| LaunchError::Bad {
                var,
                value: list.clone(),
                why: e.to_string(),
            })?;
            if let Some(first) = first {
                return Ok(Coordinator {
                    host: first,
                    port: default_port,
                    source: "the first host of SLURM_JOB_NODELIST",
                });
            }
        }
    }
    Err(LaunchError::NoCoordinator)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn each_launcher_is_read_from_its_own_variables() {
        type Vars<'a> = &'a [(&'a str, &'a str)];
        let cases: [(Vars, Launcher, usize, usize, usize); 4] = [
            (
                &[
                    ("SLURM_PROCID", "3"),
                    ("SLURM_NTASKS", "8"),
                    ("SLURM_LOCALID", "1"),
                ],
                Launcher::Slurm,
                3,
                8,
                1,
            ),
            (
                &[
                    ("OMPI_COMM_WORLD_RANK", "2"),
                    ("OMPI_COMM_WORLD_SIZE", "4"),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
                ],
                Launcher::OpenMpi,
                2,
                4,
                0,
            ),
            (
                &[("PMI_RANK", "5"), ("PMI_SIZE", "6")],
                Launcher::Pmi,
                5,
                6,
                0,
            ),
            (
                &[("RANK", "7"), ("WORLD_SIZE", "16"), ("LOCAL_RANK", "7")],
                Launcher::Torchrun,
                7,
                16,
                7,
            ),
        ];
        for (vars, launcher, rank, size, local_rank) in cases {
            let p = place(&env(vars)).unwrap();
            assert_eq!(
                p,
                Place {
                    launcher,
                    rank,
                    size,
                    local_rank
                }
            );
        }
    }

    #[test]
    fn mpirun_inside_a_slurm_allocation_is_read_as_mpirun() {
        let vars = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
        ];
        let p = place(&env(&vars)).unwrap();
        assert_eq!((p.launcher, p.rank, p.size), (Launcher::OpenMpi, 3, 4));
    }

    #[test]
    fn missing_or_bad_variables_are_named() {
        assert_eq!(place(&env(&[])), Err(LaunchError::NoLauncher));
        let e = place(&env(&[("PMI_RANK", "x"), ("PMI_SIZE", "2")])).unwrap_err();
        assert!(e.to_string().contains("PMI_RANK=x"), "{e}");
        let e = place(&env(&[("RANK", "4"), ("WORLD_SIZE", "4")])).unwrap_err();
        assert!(e.to_string().contains("below WORLD_SIZE=4"), "{e}");
    }

    #[test]
    fn a_world_beyond_the_limit_is_refused_naming_it() {
        let most = MAX_WORLD_SIZE.to_string();
        assert_eq!(
            place(&env(&[("RANK", "0"), ("WORLD_SIZE", &most)]))
                .unwrap()
                .size,
            MAX_WORLD_SIZE
        );
        for huge in ["131073", "1000000000", "18446744073709551615"] {
            let e = place(&env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", huge)])).unwrap_err();
            let e = e.to_string();
            assert!(
                e.contains(&format!("SLURM_NTASKS={huge}")) && e.contains("at most 131072 ranks"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_coordinator_comes_from_the_flag_then_master_addr_then_the_node_list() {
        let slurm = [("SLURM_JOB_NODELIST", "gpu[07-09,12]")];
        let c = coordinator(None, &env(&slurm), 18515).unwrap();
        assert_eq!((c.host.as_str(), c.port), ("gpu07", 18515));
        let both = [
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
            slurm[0],
        ];
        let c = coordinator(None, &env(&both), 18515).unwrap();
        assert_eq!((c.host.as_str(), c.port), ("10.0.0.1", 29500));
        let c = coordinator(Some("head:4000"), &env(&both), 18515).unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.source),
            ("head", 4000, "--coordinator")
        );
        assert_eq!(
            coordinator(None, &env(&[]), 1),
            Err(LaunchError::NoCoordinator)
        );
        let e = coordinator(Some("head"), &env(&[]), 1).unwrap_err();
        assert!(e.to_string().contains("HOST:PORT"), "{e}");
    }
}
