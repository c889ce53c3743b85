//! The server's part in a run without recovery: the run cannot go on
//! without any of its processes, so the watch ([`crate::bootstrap::watch`],
//! keepalive judge) only has to make sure it ends instead of hanging. A
//! process that dies, or whose host the others can no longer reach (a dead
//! host, a cut cable), is lost: the seed tells every process why and ends;
//! every other process's calls fail with that reason, and its servers end
//! with it. Under `satrun` or mpirun a death also ends the run through the
//! launcher; an unreachable host is found only here.

use crate::bootstrap::watch::Watch;
use crate::error::{SatError, SatResult};
use crate::topology::Topology;

/// A server's watch in a run without recovery.
pub(crate) struct RunGuard {
    watch: Watch,
}

impl RunGuard {
    pub(crate) fn new(watch: Watch) -> RunGuard {
        RunGuard { watch }
    }

    /// After each poll: an error when the run cannot go on (on the seed,
    /// once every process has been told why).
    pub(super) fn check(&self, topology: &Topology) -> SatResult<()> {
        match &self.watch {
            Watch::Seed(w) => {
                let Some((rank, why)) = w.lost().into_iter().next() else {
                    return Ok(());
                };
                let what = if topology.is_server(rank) {
                    "server"
                } else {
                    "client"
                };
                let reason = format!(
                    "{what} {rank} was lost ({why}): a run without recovery cannot go on without \
                     it (satrun --enable-recovery, or SAT_RECOVERY=on, lets a run outlive a \
                     client)"
                );
                tracing::error!("{reason}");
                w.abort(&reason);
                Err(SatError::Aborted(reason))
            }
            Watch::Peer(p) => match p.fatal().reason() {
                Some(why) => Err(SatError::Aborted(why.to_owned())),
                None => Ok(()),
            },
        }
    }

    /// This server finished with its run: the seed tells every process, a
    /// server says goodbye.
    pub(super) fn ended(self) {
        match self.watch {
            Watch::Seed(w) => w.ended(),
            Watch::Peer(p) => p.bye(),
        }
    }
}
