//! Records the git commit so benchmark reports can name what they measured,
//! and (with the `grpc` feature) compiles the cuzk.v1 protocol's .proto into
//! Rust with protox, so that building needs no protoc.
fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    println!("cargo:rustc-env=PROVD_COMMIT={commit}{}", if dirty { "-dirty" } else { "" });
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/index");
    #[cfg(feature = "grpc")]
    compile_proto();
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
