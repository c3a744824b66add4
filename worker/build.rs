//! Records the git commit so benchmark reports can name what they measured,
//! and (with the `grpc` feature) compiles the cuzk.v1 protocol's .proto into
//! Rust with protox, so that building needs no protoc.
fn main() {
    println!("cargo:rustc-env=PROVD_COMMIT={}", commit());
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/index");
    println!("cargo:rerun-if-env-changed=PROVD_COMMIT");
    #[cfg(feature = "grpc")]
    compile_proto();
}

/// `PROVD_COMMIT` where the builder names it (a container build has no
/// .git), else the checkout's commit ("-dirty" with uncommitted changes),
/// else "unknown".
fn commit() -> String {
    if let Some(named) = std::env::var("PROVD_COMMIT").ok().filter(|c| !c.is_empty() && c != "unknown") {
        return named;
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git").args(args).output().ok().filter(|o| o.status.success())
    };
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else { return "unknown".into() };
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|o| !o.stdout.is_empty());
    format!("{}{}", String::from_utf8_lossy(&head.stdout).trim(), if dirty { "-dirty" } else { "" })
}

#[cfg(feature = "grpc")]
fn compile_proto() {
    const PROTO: &str = "proto/cuzk/v1/proving.proto";
    println!("cargo:rerun-if-changed={PROTO}");
    let descriptors = protox::compile([PROTO], ["proto"]).expect("proto/cuzk/v1/proving.proto compiles");
    tonic_prost_build::configure()
        // The client: `provd bench doors` drives the door with it.
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)
        .expect("the cuzk.v1 services generate");
}
