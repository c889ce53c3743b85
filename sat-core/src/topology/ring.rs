//! Where a chunk lives, and where a client is served, once a run with
//! replicated homes has lost servers (`server/replicas.rs`).
//!
//! The servers form a ring in rank order. Chunk `c`'s first home is server
//! `c mod servers` and its backup the next server; a lost server's part
//! (its homes and its clients) goes to its **stand-in**, the next server of
//! the ring still alive, which is the backup of every chunk it homed. Every
//! server and client applies the same losses in the same order, so they
//! agree on every answer.

use std::collections::BTreeSet;

use crate::transport::Rank;

/// The servers of a run and those it has lost.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    servers: Vec<Rank>,
    lost: BTreeSet<Rank>,
}

impl Ring {
    /// The ring of `servers` (in rank order), none lost.
    pub fn new(servers: Vec<Rank>) -> Ring {
        Ring {
            servers,
            lost: BTreeSet::new(),
        }
    }

    pub fn servers(&self) -> &[Rank] {
        &self.servers
    }

    /// Server `server` is lost from now on.
    pub fn lose(&mut self, server: Rank) {
        self.lost.insert(server);
    }

    pub fn is_lost(&self, server: Rank) -> bool {
        self.lost.contains(&server)
    }

    /// Whether any server is lost.
    pub fn any_lost(&self) -> bool {
        !self.lost.is_empty()
    }

    /// The servers alive.
    pub fn alive(&self) -> impl Iterator<Item = Rank> + '_ {
        self.servers
            .iter()
            .copied()
            .filter(|s| !self.lost.contains(s))
    }

    /// The server that does `server`'s part: itself while alive, else the
    /// next one alive after it in the ring (itself if none is).
    pub fn stand_in(&self, server: Rank) -> Rank {
        if self.lost.is_empty() {
            return server;
        }
        let n = self.servers.len();
        let Some(at) = self.servers.iter().position(|&s| s == server) else {
            return server;
        };
        (0..n)
            .map(|k| self.servers[(at + k) % n])
            .find(|s| !self.lost.contains(s))
            .unwrap_or(server)
    }

    /// [`Ring::stand_in`] as it was while `alive` was not lost yet.
    pub fn stand_in_without(&self, server: Rank, alive: Rank) -> Rank {
        let mut before = self.clone();
        before.lost.remove(&alive);
        before.stand_in(server)
    }

    /// The first home of `chunk` (the paper's modulo placement).
    pub fn first_home(&self, chunk: u64) -> Rank {
        self.servers[(chunk % self.servers.len() as u64) as usize]
    }

    /// The home of `chunk` now.
    pub fn home(&self, chunk: u64) -> Rank {
        self.stand_in(self.first_home(chunk))
    }

    /// The backup of a chunk homed at `home`: the next server alive after
    /// it; None when no other is.
    pub fn backup_after(&self, home: Rank) -> Option<Rank> {
        let n = self.servers.len();
        let at = self.servers.iter().position(|&s| s == home)?;
        (1..n)
            .map(|k| self.servers[(at + k) % n])
            .find(|s| !self.lost.contains(s))
    }

    /// The backup of `chunk` now.
    pub fn backup(&self, chunk: u64) -> Option<Rank> {
        self.backup_after(self.home(chunk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_servers_part_goes_to_the_next_alive_which_backed_it_up() {
        let mut r = Ring::new(vec![0, 1, 2]);
        assert_eq!((r.home(4), r.backup(4)), (1, Some(2)));
        assert_eq!((r.home(5), r.backup(5)), (2, Some(0)));
        r.lose(1);
        // Chunk 4's backup becomes its home, and 0 its backup.
        assert_eq!((r.home(4), r.backup(4)), (2, Some(0)));
        // Chunk 3 (home 0) was backed up by 1: now by 2.
        assert_eq!((r.home(3), r.backup(3)), (0, Some(2)));
        assert_eq!(r.stand_in(1), 2);
        assert_eq!(r.alive().collect::<Vec<_>>(), vec![0, 2]);
        r.lose(2);
        assert_eq!((r.home(4), r.backup(4)), (0, None));
        assert_eq!(r.stand_in(2), 0);
    }
}
