//! The `warden` binary: a thin front-end over the engine. It parses arguments, loads settings,
//! makes one engine call and prints the answer. When started with `WARDEN_JAIL_HELPER=1` it is
//! the jail's single-threaded helper instead, and with `WARDEN_NET_KEEPER=1` the keeper of a
//! networked container's network (both checked before anything else runs, so no thread exists
//! yet).

mod cli;
mod doctor;
mod kube;
mod mcp;
mod profiles;
mod run;
mod serve;

fn main() {
    if std::env::var_os(warden_jail::helper::HELPER_ENV).is_some() {
        std::process::exit(warden_jail::helper::main());
    }
    if std::env::var_os(warden_net::keeper::KEEPER_ENV).is_some() {
        std::process::exit(warden_net::keeper::main());
    }
    // `warden run` forks the jail's helper first thing: it creates the sandbox's namespaces
    // while this process parses its arguments, loads settings, runs the policies and builds
    // the plan (see `warden_jail::Prestarted`). A helper that goes unused (another backend, an
    // argument error) removes its sandbox when it gets no plan.
    let prestarted = if cli::is_run(std::env::args_os()) {
        warden_jail::Prestarted::fork_if_single_threaded()
    } else {
        None
    };
    std::process::exit(cli::main(prestarted));
}
