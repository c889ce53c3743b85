//! `satrun`: start the processes of a SAT run on this host. See
//! `satrun --help` and [`sat_core::launcher`].

/// Runs before every shared library's constructor (an executable's
/// `.preinit_array` comes first): some libraries libfabric loads
/// (libinfinipath, for its psm provider) install SIGINT and SIGTERM handlers
/// that call `exit(1)` from their constructors, and the libraries take a
/// while to start; blocked from here on, these signals wait for satrun's
/// own handling, whenever they come.
#[used]
#[link_section = ".preinit_array"]
static BLOCK_SIGNALS_FIRST: extern "C" fn(i32, *const *const u8, *const *const u8) = preinit;

extern "C" fn preinit(_argc: i32, _argv: *const *const u8, _envp: *const *const u8) {
    sat_core::launcher::block_signals_at_start();
}

fn main() {
    std::process::exit(sat_core::launcher::main(std::env::args_os().skip(1)));
}
