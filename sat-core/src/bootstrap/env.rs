//! Who am I in this run: rank, size and seed, from the environment a
//! launcher sets (`satrun`, `mpirun`, `srun`, or by hand).

use std::env;

use crate::auth::Secret;
use crate::error::{SatError, SatResult};
use crate::transport::{Provider, Rank};

/// Variable pairs that carry (rank, size), in the order they are tried:
/// SAT's own first, so a user can override what a launcher set.
const RANK_SOURCES: &[(&str, &str)] = &[
    ("SAT_RANK", "SAT_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("PMIX_RANK", "PMIX_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
];

/// What the environment says about this process's place in the run.
#[derive(Debug, Clone)]
pub struct RunEnv {
    /// This process's rank, 0 to `size - 1`.
    pub rank: Rank,
    /// The number of processes in the run.
    pub size: u32,
    /// `host:port` of the seed's bootstrap socket (`SAT_SEED`).
    pub seed: Option<String>,
    /// An already-listening seed socket inherited from `satrun` (rank 0 only).
    pub seed_fd: Option<i32>,
    /// A provider forced by `SAT_PROVIDER`.
    pub provider: Option<Provider>,
    /// The variable the rank came from, for the debug stream.
    pub rank_source: &'static str,
    /// This host's name, for the debug stream.
    pub host: String,
    /// This process's id.
    pub pid: u32,
    /// The run's secret (`SAT_SECRET`): a process proves it holds it to
    /// join ([`crate::auth`]). Required when the seed is not on loopback.
    pub secret: Option<Secret>,
}

impl RunEnv {
    /// Reads the rank, size, seed, provider and secret from this process's
    /// environment (`SAT_RANK`, then Open MPI's, PMI's, PMIx's and Slurm's variables); an
    /// error says which variable is missing or malformed.
    pub fn discover() -> SatResult<RunEnv> {
        Self::from_lookup(|name| env::var(name).ok())
    }

    /// Discovery over any variable lookup, so tests need not touch the
    /// process environment.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> SatResult<RunEnv> {
        let mut found = None;
        for &(rank_var, size_var) in RANK_SOURCES {
            let Some(rank) = get(rank_var) else { continue };
            let rank = parse_num(rank_var, &rank)?;
            let size = match get(size_var) {
                Some(size) => parse_num(size_var, &size)?,
                None => {
                    return Err(SatError::Bootstrap(format!(
                        "{rank_var} is set but {size_var} is not: set both"
                    )))
                }
            };
            found = Some((rank, size, rank_var));
            break;
        }
        let Some((rank, size, rank_source)) = found else {
            return Err(SatError::Bootstrap(
                "this process does not know its rank: start it with satrun \
                 (satrun -n 3 -- ./prog), mpirun or srun, or set SAT_RANK and SAT_SIZE"
                    .into(),
            ));
        };
        if size == 0 || rank >= size {
            return Err(SatError::Bootstrap(format!(
                "{rank_source} says rank {rank} of a run of {size}: the rank must be below the size"
            )));
        }
        let seed = get("SAT_SEED").filter(|s| !s.trim().is_empty());
        if size > 1 && seed.is_none() {
            return Err(SatError::Bootstrap(
                "SAT_SEED is not set: set SAT_SEED=host:port to rank 0's host and a free TCP \
                 port for every process (satrun sets it for you)"
                    .into(),
            ));
        }
        let seed_fd = match get("SAT_SEED_FD") {
            Some(fd) if rank == 0 => Some(parse_num("SAT_SEED_FD", &fd)? as i32),
            _ => None,
        };
        let provider = match get("SAT_PROVIDER").filter(|s| !s.trim().is_empty()) {
            Some(p) => Some(
                Provider::parse(&p)
                    .map_err(|e| SatError::Bootstrap(format!("SAT_PROVIDER: {e}")))?,
            ),
            None => None,
        };
        let secret = Secret::from_lookup(&get).map_err(|e| SatError::Bootstrap(e.to_string()))?;
        Ok(RunEnv {
            secret,
            rank,
            size,
            seed,
            seed_fd,
            provider,
            rank_source,
            host: crate::os::hostname(),
            pid: std::process::id(),
        })
    }
}

fn parse_num(var: &str, value: &str) -> SatResult<u32> {
    value
        .trim()
        .parse()
        .map_err(|_| SatError::Bootstrap(format!("{var}={value:?} is not a non-negative integer")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> SatResult<RunEnv> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RunEnv::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn launchers_variables_are_understood() {
        let e = env_of(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("SAT_SEED", "h:1"),
        ])
        .unwrap();
        assert_eq!(
            (e.rank, e.size, e.rank_source),
            (2, 4, "OMPI_COMM_WORLD_RANK")
        );
        let e = env_of(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "8"),
            ("SAT_SEED", "h:1"),
        ])
        .unwrap();
        assert_eq!((e.rank, e.size), (0, 8));
        let e = env_of(&[("PMI_RANK", "1"), ("PMI_SIZE", "2"), ("SAT_SEED", "h:1")]).unwrap();
        assert_eq!((e.rank, e.size), (1, 2));
    }

    #[test]
    fn sat_variables_override_the_launchers() {
        let e = env_of(&[
            ("SAT_RANK", "1"),
            ("SAT_SIZE", "3"),
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "5"),
            ("SAT_SEED", "h:1"),
        ])
        .unwrap();
        assert_eq!((e.rank, e.size), (1, 3));
    }

    #[test]
    fn bad_environments_say_what_to_do() {
        let msg = |r: SatResult<RunEnv>| r.unwrap_err().to_string();
        assert!(msg(env_of(&[])).contains("satrun"));
        assert!(msg(env_of(&[("SAT_RANK", "1")])).contains("SAT_SIZE"));
        assert!(msg(env_of(&[("SAT_RANK", "x"), ("SAT_SIZE", "2")])).contains("SAT_RANK"));
        assert!(msg(env_of(&[
            ("SAT_RANK", "3"),
            ("SAT_SIZE", "3"),
            ("SAT_SEED", "h:1")
        ]))
        .contains("below the size"));
        assert!(msg(env_of(&[("SAT_RANK", "0"), ("SAT_SIZE", "3")])).contains("SAT_SEED"));
        assert!(msg(env_of(&[
            ("SAT_RANK", "0"),
            ("SAT_SIZE", "2"),
            ("SAT_SEED", "h:1"),
            ("SAT_PROVIDER", "ib")
        ]))
        .contains("shm, tcp, verbs"));
    }

    #[test]
    fn the_seed_socket_is_inherited_by_rank_zero_only() {
        let base = [
            ("SAT_SIZE", "2"),
            ("SAT_SEED", "127.0.0.1:9"),
            ("SAT_SEED_FD", "5"),
        ];
        let e0 = env_of(&[&base[..], &[("SAT_RANK", "0")]].concat()).unwrap();
        let e1 = env_of(&[&base[..], &[("SAT_RANK", "1")]].concat()).unwrap();
        assert_eq!(e0.seed_fd, Some(5));
        assert_eq!(e1.seed_fd, None);
    }

    #[test]
    fn a_single_process_run_needs_no_seed() {
        let e = env_of(&[("SAT_RANK", "0"), ("SAT_SIZE", "1")]).unwrap();
        assert_eq!(e.seed, None);
    }
}
