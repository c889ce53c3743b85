//! `satrun`: start the processes of a SAT run on this host. See
//! `satrun --help` and [`sat_core::launcher`].

fn main() {
    std::process::exit(sat_core::launcher::main(std::env::args_os().skip(1)));
}
