//! A check on the crate's shape, off the request path (tests only): the top-level modules'
//! imports form no circle, so the modules can be read, and moved out, from the bottom up
//! (`problem`, `settings`, `store` … below `purchase`, below `routes`, below `app`). A circle
//! such as `openapi` listing the handlers of `routes` while `routes` serves `openapi` fails here
//! with the path that closes it.
//!
//! The scan reads the source: every `crate::<module>` in code (comments and doc links do not
//! count) is an edge from the module of the file it is in to `<module>`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module → the other top-level modules its code names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The import graph of the top-level modules under `src`.
fn import_graph(src: &Path) -> Graph {
    let mut modules = BTreeSet::new();
    for entry in std::fs::read_dir(src).expect("read src") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("utf-8 name")
            .to_owned();
        if path.is_dir() || path.extension().is_some_and(|e| e == "rs") {
            modules.insert(name);
        }
    }
    modules.remove("lib");
    modules.remove("main");
    let mut graph = Graph::new();
    for module in &modules {
        let mut files = Vec::new();
        let file = src.join(format!("{module}.rs"));
        if file.is_file() {
            files.push(file);
        }
        collect_rs(&src.join(module), &mut files);
        let edges = graph.entry(module.clone()).or_default();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read source");
            for named in crate_paths(&text) {
                if named != *module && modules.contains(&named) {
                    edges.insert(named);
                }
            }
        }
    }
    graph
}

fn collect_rs(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            collect_rs(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The first segment after each `crate::` in code, including each member of a
/// `crate::{a, b::c}` group.
fn crate_paths(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut names = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        // Not the tail of a longer identifier (`my_crate::`).
        let preceded = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        rest = &rest[at + "crate::".len()..];
        if preceded {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level members of the group: what follows `{` or a `,` at depth 0.
            let mut depth = 0usize;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && (c.is_alphanumeric() || c == '_') => {
                        names.push(identifier(&group[i..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.push(identifier(rest));
        }
    }
    names
}

fn identifier(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// A circle in `graph` as the path that closes it (`a → b → a`), if there is one.
fn circle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_modules_imports_form_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = import_graph(&src);
    assert!(
        graph.contains_key("routes") && graph["routes"].contains("purchase"),
        "the scan sees the modules and their imports: {graph:?}"
    );
    if let Some(found) = circle(&graph) {
        panic!("import circle between modules: {}", found.join(" → "));
    }
}

#[test]
fn the_scan_reads_paths_groups_and_skips_comments() {
    let text = "use crate::{a::X, b, c::{d, e}};\nfn f() { crate::g::h(); }\n\
                // crate::in_comment\n/// [`crate::in_doc`]\nlet s = my_crate::not_this;";
    assert_eq!(crate_paths(text), ["a", "b", "c", "g"]);
    let graph: Graph = [("x", "y"), ("y", "z"), ("z", "x")]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), BTreeSet::from([b.to_owned()])))
        .collect();
    assert_eq!(
        circle(&graph).map(|c| c.join(" → ")).as_deref(),
        Some("x → y → z → x")
    );
}
