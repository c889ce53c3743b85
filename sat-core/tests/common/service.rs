//! A SAT service (`satrun --serve`) for the tests, and the processes that
//! attach to it (`examples/attach`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::{example, satrun, text};

/// A running service; stopped (SIGTERM, as an operator would) when dropped.
pub struct Service {
    child: Option<Child>,
    /// The connection string of its address file, `sat://SECRET@host:port`.
    pub address: String,
    dir: PathBuf,
}

impl Service {
    pub fn start(provider: &str, extra: &[&str]) -> Service {
        Service::start_with_env(provider, extra, &[])
    }

    /// [`Service::start`] with `env` added to satrun's environment.
    pub fn start_with_env(provider: &str, extra: &[&str], env: &[(&str, &str)]) -> Service {
        Service::launch(provider, extra, env, true)
    }

    /// [`Service::start`] logging at the default level whatever SAT_LOG
    /// the tests run with: for a test of what an operator sees.
    pub fn start_at_default_log_level(provider: &str, extra: &[&str]) -> Service {
        Service::launch(provider, extra, &[], false)
    }

    fn launch(provider: &str, extra: &[&str], env: &[(&str, &str)], log_env: bool) -> Service {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sat-service-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let address_file = dir.join("address"); // as address_file() says
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let mut cmd = Command::new(satrun());
        if !log_env {
            cmd.env_remove("SAT_LOG");
        }
        // satrun picks a free port itself and names it in the address file.
        let child = cmd
            .args(["--serve", "--provider", provider, "--address-file"])
            .arg(&address_file)
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start satrun --serve");
        let mut service = Service {
            child: Some(child),
            address: String::new(),
            dir,
        };
        // The address file appears (renamed into place, whole) once the
        // socket listens; clients may attach from then on.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(a) = std::fs::read_to_string(&address_file) {
                service.address = a.trim().to_owned();
                return service;
            }
            let exited = service.child.as_mut().unwrap().try_wait().unwrap();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "the service did not start: {}",
                service.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Where the service listens: the connection string's `host:port`.
    pub fn host_port(&self) -> String {
        let (_, host_port) = self
            .address
            .rsplit_once('@')
            .expect("the address file holds sat://SECRET@host:port");
        host_port.to_owned()
    }

    /// The connection string's secret.
    pub fn secret(&self) -> String {
        let rest = self.address.strip_prefix("sat://").expect("sat://");
        rest.split_once('@').expect("SECRET@").0.to_owned()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// Whether satrun still runs.
    pub fn running(&mut self) -> bool {
        let child = self.child.as_mut().expect("not stopped");
        child.try_wait().unwrap().is_none()
    }

    /// The address file.
    pub fn address_file(&self) -> PathBuf {
        self.dir.join("address")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// The service's server processes (satrun's children).
    pub fn servers(&self) -> Vec<u32> {
        children_of(self.pid())
    }

    /// Kills satrun with SIGKILL, as the OOM killer or `kill -9` would: its
    /// servers die with it (they are started to) and clean up nothing.
    /// Returns once satrun is reaped.
    pub fn kill_hard(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Stops the service and returns satrun's exit status.
    pub fn stop(&mut self) -> i32 {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) with a pid and a signal number touches no memory.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the service did not stop on SIGTERM: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The processes whose parent is `parent`, now.
pub fn children_of(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            found.push(pid);
        }
    }
    found
}

/// Runs `attach ARGS` to its end (bounded) and returns (success, stdout, stderr).
pub fn attach(args: &[&str]) -> (bool, String, String) {
    let out = super::run(Command::new(example("attach")).args(args));
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}
