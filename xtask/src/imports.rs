//! The import graph of a crate's `src/`, read from its text: which file names which, and which
//! top-level module names which — and the circles in them (`knots`). `cargo xtask circles`
//! (`main.rs`) runs it over every crate of the workspace.
//!
//! No circle means every module and every file can be read, and moved out, from the bottom up;
//! each knot is reported with a path that closes it (`purchase/answer.rs → purchase/context.rs →
//! purchase/answer.rs`).
//!
//! The scan reads the source with comments, strings and character literals blanked out (so a
//! path in a doc comment, a doc link or a log target is no import). What is an edge from one
//! file to another:
//! - every path in a `use` tree or in code that starts with `crate::` (or `$crate::`),
//!   `super::` or `self::`, or with the name of a child module of the file's module, goes to
//!   the file of the longest module prefix it names (`crate::store::batch::X` →
//!   `store/batch.rs`; `crate::store::Attempt` → `store.rs`);
//! - a path that ends in a name its module file re-exports (`pub use`) goes on to the file the
//!   name comes from (`crate::Problem` in shared → `problem.rs`, not `lib.rs`; a child's
//!   `super::Answer` → the sibling `answer.rs`), so reaching a sibling through the parent is
//!   still an edge to that sibling;
//! - `super` and `self` count the file's inline modules first (`mod tests { use super::*; }` is
//!   the file itself, no edge);
//! - a parent naming its children is structure, not an import: `mod child;` and a `pub use` (any
//!   `pub(…)`) of a name from the file's own descendants make no edge. A parent's private
//!   `use child::…` and a path to a child in its code (`baseline::decide_alone(…)`) are edges,
//!   so a child using a parent's own item while the parent uses the child is a circle. (A name
//!   the parent re-exports and also uses is not seen as the parent's use: the scan reads paths,
//!   not bare names.)
//! - the files of `#[path = "…"] mod x;` count as the module they are declared as.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path within a crate: `[]` is the crate root, `["purchase", "answer"]`
/// `purchase::answer`.
type Module = Vec<String>;

/// One source file of a crate.
#[derive(Debug)]
struct SourceFile {
    /// Relative to the crate's `src/`, with `/` separators: `purchase/answer.rs`.
    path: String,
    module: Module,
    /// The text with comments, strings and character literals blanked out.
    code: String,
}

/// The files of one crate's `src/` and their imports.
#[derive(Debug)]
pub(crate) struct Tree {
    files: Vec<SourceFile>,
    by_module: BTreeMap<Module, usize>,
    /// Per file, each name it re-exports (`pub use`) → the file the name comes from.
    reexports: Vec<BTreeMap<String, usize>>,
}

/// File → the other files its code names (by path); or top-level module → the modules it names.
pub(crate) type Graph = BTreeMap<String, BTreeSet<String>>;

impl Tree {
    /// Reads every `.rs` file under `src`: the library's (`lib.rs`, and its binary `main.rs` is
    /// a crate of its own that reaches the library by name) or else the binary's (`main.rs`);
    /// `src/bin/` holds crates of their own, not read.
    pub(crate) fn read(src: &Path) -> Self {
        let library = src.join("lib.rs").exists();
        let mut paths = Vec::new();
        collect_rs(src, &mut paths);
        let files = paths
            .into_iter()
            .map(|path| {
                let rel = path
                    .strip_prefix(src)
                    .expect("under src")
                    .to_str()
                    .expect("utf-8 path")
                    .replace('\\', "/");
                let text = std::fs::read_to_string(&path).expect("read source");
                (rel, text)
            })
            .filter(|(rel, _)| !(rel.starts_with("bin/") || library && rel == "main.rs"))
            .collect();
        Self::new(files)
    }

    /// The tree of `files` (path relative to `src/`, text).
    fn new(files: Vec<(String, String)>) -> Self {
        let mut modules: BTreeMap<String, Module> = files
            .iter()
            .map(|(path, _)| (path.clone(), default_module(path)))
            .collect();
        // `#[path]` on `mod x;` declarations, read from the raw text.
        for (path, text) in &files {
            let parent = modules[path].clone();
            let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
            for decl in mod_declarations(text) {
                let mut module = parent.clone();
                module.push(decl.name.clone());
                let child = match &decl.path {
                    Some(file) if dir.is_empty() => file.clone(),
                    Some(file) => format!("{dir}/{file}"),
                    None => match modules.iter().find(|(_, m)| **m == module) {
                        Some((child, _)) => child.clone(),
                        None => continue,
                    },
                };
                if decl.path.is_some() {
                    modules.insert(child, module);
                }
            }
        }
        let files: Vec<SourceFile> = files
            .into_iter()
            .map(|(path, text)| SourceFile {
                module: modules[&path].clone(),
                code: blank_non_code(&text),
                path,
            })
            .collect();
        let by_module = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect();
        let mut tree = Self {
            reexports: vec![BTreeMap::new(); files.len()],
            files,
            by_module,
        };
        // Re-exports may name re-exports: resolve them until nothing changes.
        for _ in 0..8 {
            let mut changed = false;
            for i in 0..tree.files.len() {
                let paths = tree.paths(i);
                let aliases = tree.aliases(i, &paths);
                for item in paths {
                    if !item.reexport {
                        continue;
                    }
                    let Some(name) = item.exported.clone() else {
                        continue;
                    };
                    if let Some(to) = tree.resolve(i, item.inline, &item.segments, &aliases) {
                        if to != i && tree.reexports[i].get(&name) != Some(&to) {
                            tree.reexports[i].insert(name, to);
                            changed = true;
                        }
                    }
                }
            }
            if !changed {
                break;
            }
        }
        tree
    }

    /// The paths of file `i`'s code.
    fn paths(&self, i: usize) -> Vec<PathUse> {
        code_paths(&self.files[i].code)
    }

    /// Where a path of file `i` (inside `inline` inline modules of it) leads: to the module of
    /// its longest prefix that is a file of this crate, and the segment after that prefix.
    /// `aliases`: the modules the file's `use`s bring in by name (`use crate::store;`).
    fn locate<'p>(
        &self,
        i: usize,
        inline: usize,
        segments: &'p [String],
        aliases: &BTreeMap<String, Module>,
    ) -> Located<'p> {
        let here = &self.files[i].module;
        let Some(first) = segments.first() else {
            return Located::Outside;
        };
        let (mut module, rest): (Module, &[String]) = match first.as_str() {
            "crate" | "$crate" => (Vec::new(), &segments[1..]),
            "super" => {
                let ups = segments.iter().take_while(|s| *s == "super").count();
                if ups <= inline {
                    return Located::SameFile;
                }
                let out = ups - inline;
                if out > here.len() {
                    return Located::Outside;
                }
                (here[..here.len() - out].to_vec(), &segments[ups..])
            }
            "self" if inline > 0 => return Located::SameFile,
            "self" => (here.clone(), &segments[1..]),
            name if inline == 0 && self.by_module.contains_key(&child(here, name)) => {
                (here.clone(), segments)
            }
            name => match aliases.get(name) {
                Some(module) => (module.clone(), &segments[1..]),
                None => return Located::Outside,
            },
        };
        for (at, segment) in rest.iter().enumerate() {
            let deeper = child(&module, segment);
            if !self.by_module.contains_key(&deeper) {
                return Located::Module(module, rest.get(at));
            }
            module = deeper;
        }
        Located::Module(module, None)
    }

    /// The file a path of file `i` names, if it names one of this crate: the file of the module
    /// it leads to, or, for a name that file re-exports, the file the name comes from.
    fn resolve(
        &self,
        i: usize,
        inline: usize,
        segments: &[String],
        aliases: &BTreeMap<String, Module>,
    ) -> Option<usize> {
        match self.locate(i, inline, segments, aliases) {
            Located::SameFile => Some(i),
            Located::Outside => None,
            Located::Module(module, name) => {
                let file = *self.by_module.get(&module)?;
                Some(
                    name.and_then(|n| self.reexports[file].get(n).copied())
                        .unwrap_or(file),
                )
            }
        }
    }

    /// The modules file `i`'s `use`s bring in by name (`use crate::store;`, `use super::{self,
    /// x as y}`), so that `store::decide_batch` later in its code is a path into `store`.
    fn aliases(&self, i: usize, paths: &[PathUse]) -> BTreeMap<String, Module> {
        let none = BTreeMap::new();
        paths
            .iter()
            .filter_map(|p| {
                let name = p.exported.clone()?;
                match self.locate(i, p.inline, &p.segments, &none) {
                    Located::Module(module, None) => Some((name, module)),
                    _ => None,
                }
            })
            .collect()
    }

    /// Whether file `to`'s module is a descendant of file `from`'s.
    fn descends(&self, to: usize, from: usize) -> bool {
        let (to, from) = (&self.files[to].module, &self.files[from].module);
        to.len() > from.len() && to.starts_with(from)
    }

    /// Each file (by path) → the files its imports name (see the module docs).
    pub(crate) fn file_graph(&self) -> Graph {
        let mut graph = Graph::new();
        for (i, file) in self.files.iter().enumerate() {
            let edges = graph.entry(file.path.clone()).or_default();
            let paths = self.paths(i);
            let aliases = self.aliases(i, &paths);
            for item in paths {
                let Some(to) = self.resolve(i, item.inline, &item.segments, &aliases) else {
                    continue;
                };
                if to == i || (item.reexport && self.descends(to, i)) {
                    continue;
                }
                edges.insert(self.files[to].path.clone());
            }
        }
        graph
    }

    /// Each top-level module → the other top-level modules its files name (the crate root
    /// aside).
    pub(crate) fn module_graph(&self) -> Graph {
        let top = |path: &str| -> Option<String> {
            let file = self.files.iter().find(|f| f.path == path)?;
            file.module.first().cloned()
        };
        let mut graph = Graph::new();
        for (from, tos) in self.file_graph() {
            let Some(from) = top(&from) else { continue };
            let edges = graph.entry(from.clone()).or_default();
            for to in tos {
                if let Some(to) = top(&to).filter(|to| *to != from) {
                    edges.insert(to);
                }
            }
        }
        graph
    }
}

/// The module a file is by its place: `lib.rs` (or a binary's `main.rs`) the root, `a/mod.rs` and `a.rs` `a`, `a/b.rs`
/// `a::b`.
fn default_module(path: &str) -> Module {
    let stem = path.strip_suffix(".rs").unwrap_or(path);
    let mut module: Module = stem.split('/').map(str::to_owned).collect();
    if module.last().is_some_and(|m| m == "mod") || module == ["lib"] || module == ["main"] {
        module.pop();
    }
    module
}

/// `module::name`.
fn child(module: &Module, name: &str) -> Module {
    let mut child = module.clone();
    child.push(name.to_owned());
    child
}

/// Where a path leads ([`Tree::locate`]).
#[derive(Debug)]
enum Located<'p> {
    /// Into the file the path is in (`super::*` in its inline tests).
    SameFile,
    /// To a module of the crate, and the name after it (`None`: the path names the module).
    Module(Module, Option<&'p String>),
    /// Elsewhere: another crate, or a name the scan does not follow.
    Outside,
}

fn collect_rs(dir: &Path, files: &mut Vec<PathBuf>) {
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

/// A `mod name;` declaration and the attribute on it that the scan cares about.
#[derive(Debug)]
struct ModDecl {
    name: String,
    /// `#[path = "…"]`.
    path: Option<String>,
}

/// The out-of-line `mod name;` declarations of a file, with the attributes on the lines just
/// above each.
fn mod_declarations(text: &str) -> Vec<ModDecl> {
    let mut found = Vec::new();
    let mut attributes: Vec<&str> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("#[") {
            attributes.push(line);
            continue;
        }
        let decl = line
            .strip_prefix("pub ")
            .or_else(|| line.strip_prefix("pub(crate) "))
            .or_else(|| line.strip_prefix("pub(super) "))
            .unwrap_or(line);
        if let Some(name) = decl
            .strip_prefix("mod ")
            .and_then(|rest| rest.strip_suffix(';'))
        {
            found.push(ModDecl {
                name: name.trim().to_owned(),
                path: attributes.iter().find_map(|a| {
                    let value = a.strip_prefix("#[path")?.trim_start().strip_prefix('=')?;
                    Some(
                        value
                            .trim()
                            .trim_end_matches(']')
                            .trim()
                            .trim_matches('"')
                            .to_owned(),
                    )
                }),
            });
        }
        attributes.clear();
    }
    found
}

/// `text` with comments (line, block, doc), string literals (plain, raw, byte) and character
/// literals replaced by spaces; newlines and everything else kept.
fn blank_non_code(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let prev_ident = i > 0 && ident(chars[i - 1]);
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if !prev_ident && (c == 'r' || (c == 'b' && next == Some('r'))) && {
            // A raw string: r"…", r#"…"#, br"…" (not a raw identifier r#name).
            let start = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[start..].iter().take_while(|&&h| h == '#').count();
            chars.get(start + hashes) == Some(&'"')
        } {
            let start = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[start..].iter().take_while(|&&h| h == '#').count();
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body = start + hashes + 1;
            let rest: String = chars[body..].iter().collect();
            let end = rest.find(&close).map_or(chars.len(), |at| {
                body + rest[..at].chars().count() + close.len()
            });
            for &skipped in &chars[i..end] {
                out.push(blank(skipped));
            }
            i = end;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal: '\n', '\'', '\u{…}'.
            out.push_str("  ");
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            // A character literal '"'; a lifetime ('a) is left as it is.
            out.push_str("   ");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// One path in a file's code.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PathUse {
    segments: Vec<String>,
    /// How many inline modules (`mod name { … }`) of the file it is in.
    inline: usize,
    /// A leaf of a `pub use` (any `pub(…)`).
    reexport: bool,
    /// For a leaf of a `use` tree: the name it brings in (`as` aside, the last segment).
    exported: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' || (c == '$' && chars.get(i + 1) == Some(&'c')) {
            let start = i;
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push(Token::Path);
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(Token::Punct(c));
            }
            i += 1;
        }
    }
    out
}

/// Every path of `code` (already blanked by [`blank_non_code`]): the leaves of `use` trees and
/// the paths in code of two or more segments.
fn code_paths(code: &str) -> Vec<PathUse> {
    let tokens = tokens(code);
    let mut found = Vec::new();
    let mut depth = 0usize;
    // Brace depths at which an inline module's body opened.
    let mut inline: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Ident(word)
                if word == "use" && tokens.get(i + 1) != Some(&Token::Punct('<')) =>
            {
                let reexport = match i.checked_sub(1).map(|p| &tokens[p]) {
                    Some(Token::Ident(p)) => p == "pub",
                    // `pub(crate) use`, `pub(in path) use`
                    Some(Token::Punct(')')) => tokens[..i]
                        .iter()
                        .rposition(|t| *t == Token::Punct('('))
                        .and_then(|open| open.checked_sub(1))
                        .is_some_and(|p| tokens[p] == Token::Ident("pub".into())),
                    _ => false,
                };
                let end = tokens[i..]
                    .iter()
                    .position(|t| *t == Token::Punct(';'))
                    .map_or(tokens.len(), |at| i + at);
                let mut leaves = Vec::new();
                use_tree(&tokens[i + 1..end], &[], &mut leaves);
                for (segments, exported) in leaves {
                    found.push(PathUse {
                        segments,
                        inline: inline.len(),
                        reexport,
                        exported,
                    });
                }
                i = end + 1;
                continue;
            }
            Token::Ident(word)
                if word == "mod"
                    && matches!(tokens.get(i + 1), Some(Token::Ident(_)))
                    && tokens.get(i + 2) == Some(&Token::Punct('{')) =>
            {
                depth += 1;
                inline.push(depth);
                i += 3;
                continue;
            }
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Token::Ident(first)
                if tokens.get(i + 1) == Some(&Token::Path)
                    && i.checked_sub(1).map(|p| &tokens[p]) != Some(&Token::Path) =>
            {
                let mut segments = vec![first.clone()];
                let mut j = i + 1;
                while tokens.get(j) == Some(&Token::Path) {
                    match tokens.get(j + 1) {
                        Some(Token::Ident(next)) => {
                            segments.push(next.clone());
                            j += 2;
                        }
                        _ => break,
                    }
                }
                found.push(PathUse {
                    segments,
                    inline: inline.len(),
                    reexport: false,
                    exported: None,
                });
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The leaves of a `use` tree (the tokens between `use` and `;`) under `prefix`, each with the
/// name it brings in: `a::{b, c::{self, d as e}, f::*}` → `a::b` (b), `a::c` (c), `a::c::d`
/// (e), `a::f` (a glob: none).
fn use_tree(tokens: &[Token], prefix: &[String], leaves: &mut Vec<(Vec<String>, Option<String>)>) {
    let mut path = prefix.to_vec();
    let mut i = 0;
    while let Some(token) = tokens.get(i) {
        match token {
            Token::Path => {}
            // `a::{self}`: `a` itself.
            Token::Ident(word) if word == "self" && !prefix.is_empty() => {}
            Token::Ident(word) if word == "as" => {
                let alias = match tokens.get(i + 1) {
                    Some(Token::Ident(alias)) if alias != "_" => Some(alias.clone()),
                    _ => None,
                };
                leaves.push((path, alias));
                return;
            }
            Token::Ident(segment) => path.push(segment.clone()),
            Token::Punct('*') => {
                leaves.push((path, None));
                return;
            }
            Token::Punct('{') => {
                // Each member of the group, up to its matching brace, is a tree under `path`.
                let mut depth = 0usize;
                let mut start = i + 1;
                for j in i + 1..tokens.len() {
                    match tokens[j] {
                        Token::Punct('{') => depth += 1,
                        Token::Punct('}') if depth > 0 => depth -= 1,
                        Token::Punct(',' | '}') if depth == 0 => {
                            use_tree(&tokens[start..j], &path, leaves);
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
                return;
            }
            Token::Punct(_) => {}
        }
        i += 1;
    }
    if path.len() > prefix.len() || tokens.first() == Some(&Token::Ident("self".into())) {
        let name = path.last().cloned();
        leaves.push((path, name));
    }
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

/// Every knot of `graph` (a strongly connected set of two or more nodes: each reaches every
/// other), each as one circle through it and, when the knot is larger than that circle, the
/// rest of its nodes: `a → b → a (with c)`.
pub(crate) fn knots(graph: &Graph) -> Vec<String> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(node) = todo.pop() {
            for next in graph.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|node| (node, reach(node))).collect();
    let mut placed = BTreeSet::new();
    let mut found = Vec::new();
    for (node, from_node) in &reaches {
        if placed.contains(*node) || !from_node.contains(*node) {
            continue;
        }
        let knot: BTreeSet<String> = from_node
            .iter()
            .filter(|other| reaches.get(other).is_some_and(|r| r.contains(*node)))
            .cloned()
            .collect();
        let inside: Graph = knot
            .iter()
            .map(|n| {
                let edges = graph[n].iter().filter(|m| knot.contains(*m)).cloned();
                (n.clone(), edges.collect())
            })
            .collect();
        let path = circle(&inside).expect("a knot has a circle");
        let rest: Vec<&str> = knot
            .iter()
            .filter(|n| !path.contains(n))
            .map(String::as_str)
            .collect();
        let mut line = path.join(" → ");
        if !rest.is_empty() {
            line.push_str(&format!(" (with {})", rest.join(", ")));
        }
        found.push(line);
        placed.extend(knot);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_blanks_comments_strings_and_characters() {
        let text = "use crate::a; // crate::b\n/* crate::c /* nested */ crate::d */ let s = \"crate::e \\\" crate::f\";\n\
                let r = r#\"crate::g \"# ; let q = '\"'; let e = '\\''; fn f<'x>(v: &'x str) { crate::h::i(); }\n\
                let raw = r#type; crate::j::k;";
        let paths: Vec<String> = code_paths(&blank_non_code(text))
            .into_iter()
            .map(|p| p.segments.join("::"))
            .collect();
        assert_eq!(paths, ["crate::a", "crate::h::i", "crate::j::k"]);
    }

    #[test]
    fn the_scan_reads_use_trees() {
        let tokens = tokens("crate::{a::X, b, c::{self, d as e}, f::*}");
        let mut leaves = Vec::new();
        use_tree(&tokens, &[], &mut leaves);
        let leaves: Vec<(String, Option<&str>)> = leaves
            .iter()
            .map(|(p, n)| (p.join("::"), n.as_deref()))
            .collect();
        assert_eq!(
            leaves,
            [
                ("crate::a::X".to_owned(), Some("X")),
                ("crate::b".to_owned(), Some("b")),
                ("crate::c".to_owned(), Some("c")),
                ("crate::c::d".to_owned(), Some("e")),
                ("crate::f".to_owned(), None),
            ]
        );
    }

    /// A small crate with each kind of edge, and the knots the checks find in it.
    #[test]
    fn the_scan_finds_circles_between_files_and_modules() {
        let file = |path: &str, text: &str| (path.to_owned(), text.to_owned());
        let tree = Tree::new(vec![
            file(
                "lib.rs",
                "pub mod a;\npub mod b;\npub mod c;\npub use b::Thing;\n",
            ),
            // A parent: a re-export (structure), a private use and a path in code (edges).
            file(
                "a/mod.rs",
                "mod x;\nmod y;\nmod z;\n#[cfg(test)]\n#[path = \"a_tests.rs\"]\nmod tests;\n\
             pub use x::X;\nuse z::Z;\nfn f() { z::g(); }\n",
            ),
            // Uses its sibling y; its inline tests' `super` is itself, `super::super` the parent.
            file(
                "a/x.rs",
                "use super::y::Y;\npub struct X;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    \
             use super::super::y::Y2;\n}\n",
            ),
            // Reaches its sibling x through the parent's re-export, b through the root's.
            file(
                "a/y.rs",
                "pub struct Y;\nfn h() { super::X::new(); crate::Thing::new(); crate::c::c(); }\n",
            ),
            // Uses an item of its parent's own, while the parent uses it.
            file("a/z.rs", "pub struct Z;\nuse super::f;\n"),
            file("a/a_tests.rs", "use super::*;\n"),
            file(
                "b.rs",
                "pub struct Thing; // crate::a::x\nconst S: &str = \"crate::c\";\n",
            ),
            file("c.rs", "use crate::a::X;\npub fn c() {}\n"),
        ]);
        let graph = tree.file_graph();
        let edges = |from: &str| -> Vec<&str> { graph[from].iter().map(String::as_str).collect() };
        let none: [&str; 0] = [];
        assert_eq!(edges("lib.rs"), none);
        assert_eq!(edges("a/mod.rs"), ["a/z.rs"]);
        assert_eq!(edges("a/x.rs"), ["a/y.rs"]);
        assert_eq!(edges("a/y.rs"), ["a/x.rs", "b.rs", "c.rs"]);
        assert_eq!(edges("a/z.rs"), ["a/mod.rs"]);
        assert_eq!(edges("a/a_tests.rs"), ["a/mod.rs"]);
        assert_eq!(edges("b.rs"), none);
        assert_eq!(edges("c.rs"), ["a/x.rs"]);
        assert_eq!(
            knots(&graph),
            [
                "a/mod.rs → a/z.rs → a/mod.rs",
                "a/x.rs → a/y.rs → a/x.rs (with c.rs)"
            ]
        );
        assert_eq!(knots(&tree.module_graph()), ["a → c → a"]);
    }
}
