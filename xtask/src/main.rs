//! `cargo xtask circles` (an alias of `cargo run -p xtask --`, see `.cargo/config.toml`): the
//! workspace's structural check, run by `scripts/test.sh` and by `cargo test --workspace`. In
//! every crate of the workspace (the `members` of the root `Cargo.toml`), the imports form no
//! circle — neither between two files of its `src/` nor between its top-level modules — so every
//! file and every module can be read, and moved out, from the bottom up ([`imports`] says what
//! counts as an import). Files are cut by concept, not by length: there is no line limit.

mod imports;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use imports::{Tree, knots};

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("circles") => {
            let circles = circles(&workspace());
            if circles.is_empty() {
                println!("no import circle between the files or the modules of any crate");
                ExitCode::SUCCESS
            } else {
                eprintln!("import circles:\n{}", circles.join("\n"));
                ExitCode::FAILURE
            }
        }
        _ => {
            eprintln!("usage: cargo xtask circles");
            ExitCode::from(2)
        }
    }
}

/// The workspace's directory (this crate's parent).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The crates of the workspace at `root`: the `members` of its `Cargo.toml`.
fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let Some(list) = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members"))
        .and_then(|l| l.split_once('[').map(|(_, l)| l))
        .and_then(|l| l.split_once(']').map(|(l, _)| l))
    else {
        return Vec::new();
    };
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Every knot of every crate of the workspace at `root`, one line each.
fn circles(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for name in members(root) {
        let tree = Tree::read(&root.join(&name).join("src"));
        for knot in knots(&tree.module_graph()) {
            found.push(format!("{name}: modules {knot}"));
        }
        for knot in knots(&tree.file_graph()) {
            found.push(format!("{name}/src: files {knot}"));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_import_circle_in_the_workspace() {
        let root = workspace();
        let members = members(&root);
        for name in ["origin", "edge", "shared", "redlock", "bench", "xtask"] {
            assert!(members.iter().any(|m| m == name), "{name}: {members:?}");
        }
        let circles = circles(&root);
        assert!(
            circles.is_empty(),
            "import circles:\n{}",
            circles.join("\n")
        );
    }

    /// The scan sees the real crates' imports (a scan that finds nothing finds no circle either).
    #[test]
    fn the_scan_sees_the_crates_imports() {
        let read = |name: &str| Tree::read(&workspace().join(name).join("src"));
        let origin = read("origin");
        let modules = origin.module_graph();
        assert!(
            modules["routes"].contains("purchase") && modules["store"].contains("decision"),
            "the scan sees the modules and their imports: {modules:?}"
        );
        let files = origin.file_graph();
        for (from, to) in [
            ("purchase/combiner.rs", "purchase/context.rs"),
            ("purchase/combiner.rs", "lease.rs"),
            ("routes/purchases.rs", "purchase/answer.rs"),
            ("routes/orders.rs", "routes/extract.rs"),
            ("store/batch/decide.rs", "decision.rs"),
        ] {
            assert!(files[from].contains(to), "{from} → {to}: {:?}", files[from]);
        }
        assert!(
            !files["purchase/mod.rs"].contains("purchase/answer.rs"),
            "a parent's re-export of its child is structure: {:?}",
            files["purchase/mod.rs"]
        );
        let edge = read("edge").file_graph();
        assert!(edge["protocol.rs"].contains("config.rs"), "{edge:?}");
        let shared = read("shared").file_graph();
        assert!(shared["schedule.rs"].contains("problem.rs"), "{shared:?}");
        // A binary crate: `main.rs` is its root.
        let bench = read("bench");
        assert!(bench.module_graph()["soak"].contains("cluster"));
        assert!(bench.file_graph()["main.rs"].contains("sale.rs"));
    }

    /// Two crates written to a scratch workspace, one with a circle between two files: the check
    /// names it, and only it.
    #[test]
    fn the_check_finds_a_circle_between_two_files() {
        let root = std::env::temp_dir().join(format!("xtask-circles-{}", std::process::id()));
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        };
        write("Cargo.toml", "[workspace]\nmembers = [\"good\", \"bad\"]\n");
        write("good/src/lib.rs", "mod a;\nmod b;\n");
        write("good/src/a.rs", "use crate::b::B;\npub struct A;\n");
        write("good/src/b.rs", "pub struct B;\n");
        write("bad/src/main.rs", "mod a;\nmod b;\nfn main() {}\n");
        write("bad/src/a.rs", "use crate::b::B;\npub struct A;\n");
        write("bad/src/b.rs", "pub struct B;\nfn f() { super::a::A; }\n");
        let found = circles(&root);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(
            found,
            [
                "bad: modules a → b → a",
                "bad/src: files a.rs → b.rs → a.rs"
            ]
        );
    }
}
