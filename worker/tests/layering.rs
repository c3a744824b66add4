//! The crate's modules depend on each other one way only: a module may name
//! (`crate::…`) the modules below it, never those above or beside it. Data
//! flows request → job → partitions → stages → proof; the imports run the
//! other way, and this test fails the build when one turns round. Test code
//! (`tests.rs` files, a trailing `#[cfg(test)] mod tests`) may reach anywhere.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Each top-level module and its layer: a module imports only from lower
/// layers. Modules that share a layer (circuits and backend) know nothing of
/// each other.
const LAYERS: &[(&str, u8)] = &[
    ("data_dir", 0),
    ("telemetry", 0),
    ("groth16", 1),
    ("circuits", 2),
    ("backend", 2),
    ("pipeline", 3),
    ("prover", 3),
    ("jobs", 4),
    ("fleet", 5),
    ("config", 6),
    ("service", 7),
    ("http", 8),
    ("grpc", 8),
    // `bench doors` drives the gRPC door with its client.
    ("bench", 9),
    ("demo", 9),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments and without its trailing test module.
fn code(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests {").unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| l.split(" // ").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a piece of code names through `crate::` (and
/// `crate::{a, b::c}`).
fn named(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
    };
    let mut out = BTreeSet::new();
    for (i, m) in code.match_indices("crate::") {
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[i + m.len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let (mut depth, mut start) = (0, 0);
                for (j, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            out.insert(ident(&group[start..j]));
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            out.insert(ident(&group[start..j]));
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
            }
            None => {
                out.insert(ident(rest));
            }
        }
    }
    out
}

/// Every import against the layers: "file: module (layer) → module (layer)".
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        if rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let top = rel.components().next().unwrap().as_os_str().to_string_lossy();
        let module = top.trim_end_matches(".rs");
        if matches!(module, "lib" | "main") {
            continue;
        }
        let from =
            layer(module).unwrap_or_else(|| panic!("src/{} is in no layer: add it to LAYERS", rel.display()));
        for to in named(&code(&std::fs::read_to_string(&file).unwrap())) {
            let Some(to_layer) = layer(&to) else { continue };
            if to != module && to_layer >= from {
                found.push(format!("src/{}: {module} ({from}) → {to} ({to_layer})", rel.display()));
            }
        }
    }
    found
}

#[test]
fn imports_run_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(found.is_empty(), "imports against the layers:\n{}", found.join("\n"));
}

#[test]
fn the_check_sees_an_import_that_turns_round() {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("pipeline/mod.rs", "use crate::jobs::journal::Journal;\n// crate::service in a comment\n");
    write(
        "circuits/mod.rs",
        "use crate::groth16::Proof;\n#[cfg(test)]\nmod tests {\n    use crate::pipeline::Engine;\n}\n",
    );
    write("groth16/tests.rs", "use crate::circuits::BenchCircuit;\n");
    write("telemetry/mod.rs", "fn f() -> crate::backend::Cpu { todo!() }\n");
    write("groth16/mod.rs", "use crate::{telemetry::Metrics, circuits::{a, b}};\n");
    let mut found = violations(dir.path());
    found.sort();
    assert_eq!(
        found,
        [
            "src/groth16/mod.rs: groth16 (1) → circuits (2)",
            "src/pipeline/mod.rs: pipeline (3) → jobs (4)",
            "src/telemetry/mod.rs: telemetry (0) → backend (2)",
        ]
    );
}
