//! The file-level import graph of the daemon, the core and the shim has no cycle and no
//! import that runs back up.
//!
//! Every `.rs` file of a crate's `src/` is a node (a module's sibling test file, such as
//! `x_tests.rs` or `tests/`, counts as part of the module it tests). An edge `a -> b`
//! means that `a` names something defined in `b`: through `use crate::…`, `use super::…`,
//! `use self::…`, a path that starts with a child module, or a `crate::…`/`super::…` path
//! in an expression or a type. Re-exports (`pub use`) are followed to the file that defines
//! the name, so naming a type through a parent's re-export is an edge to its owner.
//!
//! Two things are reported:
//! - **cycles**: the strongly connected components of the graph with more than one file;
//!   every edge inside one is a `cycle` edge.
//! - **upward imports**: an edge from a file to the file of its parent module or an
//!   ancestor (`daemon/cm/conn.rs -> daemon/mod.rs`), which makes the child depend on
//!   the module that is supposed to be built from it.
//!
//! `module_graph_allow.txt` beside this file lists the edges that exist today (the debt).
//! The test fails on an edge that is not listed, and on a listed edge that no longer
//! exists, so the list only shrinks: when you break a cycle, delete its lines.
//! Run with `--nocapture` to see the cycles and the edges.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The crates whose `src/` folders are checked, relative to the workspace root.
const CRATES: &[&str] = &["emulator", "emulator/core", "verbs-shim"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent")
        .to_path_buf()
}

// ---------------------------------------------------------------------------------------
// Lexing: identifiers and punctuation, with comments, strings and chars removed.

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

fn lex(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == 'r'
            && (c.get(i + 1) == Some(&'#') || c.get(i + 1) == Some(&'"'))
            && raw_string_end(&c, i + 1).is_some()
        {
            i = raw_string_end(&c, i + 1).unwrap_or(c.len());
        } else if ch == 'b' && c.get(i + 1) == Some(&'"') {
            i = string_end(&c, i + 1);
        } else if ch == 'b' && c.get(i + 1) == Some(&'r') && raw_string_end(&c, i + 2).is_some() {
            i = raw_string_end(&c, i + 2).unwrap_or(c.len());
        } else if ch == '"' {
            i = string_end(&c, i);
        } else if ch == '\'' {
            // A char literal ('a', '\n', '\u{..}') or a lifetime ('a).
            if c.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(c[start..i].iter().collect()));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(Tok::Path);
            i += 2;
        } else if ch.is_whitespace() || ch.is_ascii_digit() {
            i += 1;
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

/// The index after the `<…>` (nested) that starts at `i`.
fn skip_angle(toks: &[Tok], mut i: usize) -> usize {
    let mut depth = 0;
    while let Some(t) = toks.get(i) {
        match t {
            Tok::Punct('<') => depth += 1,
            Tok::Punct('>') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            Tok::Punct('{') | Tok::Punct(';') => return i,
            _ => {}
        }
        i += 1;
    }
    i
}

/// The index after a `"…"` string starting at `i`.
fn string_end(c: &[char], mut i: usize) -> usize {
    i += 1;
    while i < c.len() {
        match c[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The index after a raw string whose `#`s or quote start at `i`, if it is one.
fn raw_string_end(c: &[char], mut i: usize) -> Option<usize> {
    let mut hashes = 0;
    while c.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    if c.get(i) != Some(&'"') {
        return None;
    }
    i += 1;
    while i < c.len() {
        if c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')) {
            return Some(i + 1 + hashes);
        }
        i += 1;
    }
    Some(i)
}

// ---------------------------------------------------------------------------------------
// Files and the modules they hold.

/// One source file: its module path (segments below the crate root) and what it says.
#[derive(Debug, Default)]
struct File {
    /// `crate/rel/path.rs` as printed.
    name: String,
    /// The module the file is (`["daemon", "engine"]`).
    module: Vec<String>,
    /// The node the file belongs to: its module with a trailing `tests` part removed.
    node: Vec<String>,
    /// Names defined in the file (any nesting), for following re-exports.
    defines: BTreeSet<String>,
    /// `pub use` items: name -> absolute path.
    reexports: BTreeMap<String, Vec<String>>,
    /// `pub use path::*` items: absolute module paths.
    glob_reexports: Vec<Vec<String>>,
    /// Every path the file names, absolute.
    refs: Vec<Vec<String>>,
    /// Types defined elsewhere that this file adds an inherent `impl` block to, absolute.
    /// Such a block is part of the type: whoever uses the type depends on this file, so
    /// the type's file gets an edge to it (method calls name no path the parser could see).
    impls: Vec<Vec<String>>,
}

/// The module path of a source file of `src/` (`daemon/mod.rs` -> `daemon`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs").to_string();
    if stem != "mod" && stem != "lib" {
        parts.push(stem);
    }
    parts
}

/// The node of a module: everything from the first `tests` segment on belongs to the
/// module being tested.
fn node_of(module: &[String]) -> Vec<String> {
    let end = module
        .iter()
        .position(|s| s == "tests")
        .unwrap_or(module.len());
    module[..end].to_vec()
}

fn rs_files(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir.join(rel)) else {
        return;
    };
    for e in rd.flatten() {
        let r = rel.join(e.file_name());
        match e.file_type() {
            // Binaries (`src/bin/`) are crates of their own.
            Ok(t) if t.is_dir() && r != Path::new("bin") => rs_files(dir, &r, out),
            Ok(t) if t.is_file() && r.extension().is_some_and(|x| x == "rs") => out.push(r),
            _ => {}
        }
    }
}

/// Resolves a path as written in module `at` to an absolute path, or `None` when it names
/// another crate.
fn absolute(at: &[String], path: &[String], children: &BTreeSet<String>) -> Option<Vec<String>> {
    let mut cur: Vec<String> = at.to_vec();
    let mut it = path.iter().peekable();
    match it.peek().map(|s| s.as_str()) {
        Some("crate") => {
            cur.clear();
            it.next();
        }
        Some("self") => {
            it.next();
        }
        Some("super") => {
            while it.peek().map(|s| s.as_str()) == Some("super") {
                it.next();
                cur.pop()?;
            }
        }
        Some(first) if children.contains(first) => {}
        _ => return None,
    }
    cur.extend(it.cloned());
    Some(cur)
}

/// Expands a `use` tree starting at `toks[i]`; returns the paths and the index after it.
fn use_tree(toks: &[Tok], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match toks.get(i) {
            Some(Tok::Ident(s)) if s == "as" => {
                i += 2; // `as name`
                out.push(path);
                return i;
            }
            Some(Tok::Ident(s)) => {
                if s == "self" && !path.is_empty() && path.len() == prefix.len() {
                    // `{self, ..}` names the prefix itself.
                } else {
                    path.push(s.clone());
                }
                i += 1;
            }
            Some(Tok::Path) => i += 1,
            Some(Tok::Punct('*')) => {
                path.push("*".to_string());
                out.push(path);
                return i + 1;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match toks.get(i) {
                        Some(Tok::Punct('}')) => return i + 1,
                        Some(Tok::Punct(',')) => i += 1,
                        None => return i,
                        _ => i = use_tree(toks, i, &path, out),
                    }
                }
            }
            _ => {
                out.push(path);
                return i;
            }
        }
    }
}

/// `mod NAME {` at `toks[i]`: the name of the inline module it opens.
fn inline_mod(toks: &[Tok], i: usize) -> Option<&str> {
    match (&toks[i], toks.get(i + 1), toks.get(i + 2)) {
        (Tok::Ident(k), Some(Tok::Ident(n)), Some(Tok::Punct('{'))) if k == "mod" => Some(n),
        _ => None,
    }
}

/// The inline module a token sits in, followed through braces.
struct Nesting {
    /// The brace depth outside each inline module that is open.
    open: Vec<usize>,
    depth: usize,
    /// The current module, absolute.
    module: Vec<String>,
}

impl Nesting {
    fn new(module: &[String]) -> Self {
        Nesting {
            open: Vec::new(),
            depth: 0,
            module: module.to_vec(),
        }
    }

    /// Follows a brace or a `mod NAME {` at `toks[i]`; the index to go on from if it was one.
    fn step(&mut self, toks: &[Tok], i: usize) -> Option<usize> {
        if let Some(n) = inline_mod(toks, i) {
            self.open.push(self.depth);
            self.module.push(n.to_string());
            self.depth += 1;
            return Some(i + 3);
        }
        match toks[i] {
            Tok::Punct('{') => self.depth += 1,
            Tok::Punct('}') => {
                self.depth = self.depth.saturating_sub(1);
                if self.open.last() == Some(&self.depth) {
                    self.open.pop();
                    self.module.pop();
                }
            }
            _ => return None,
        }
        Some(i + 1)
    }
}

/// Reads one file: definitions, re-exports, child modules and every path it names.
fn read_file(name: String, module: Vec<String>, src: &str) -> (File, Vec<(String, String)>) {
    let toks = lex(src);
    let ident = |k: usize| match toks.get(k) {
        Some(Tok::Ident(s)) => Some(s.as_str()),
        _ => None,
    };
    // Child modules declared anywhere in the file, keyed by the inline module they sit in;
    // `#[path]` attributes are returned for the caller to map.
    let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    let mut path_attrs = Vec::new();
    let mut f = File {
        name,
        node: node_of(&module),
        module: module.clone(),
        ..File::default()
    };
    // First pass: inline module structure and child declarations.
    let mut pending_path: Option<String> = None;
    let mut nest = Nesting::new(&module);
    let mut i = 0;
    while i < toks.len() {
        if let Some(mod_name) = inline_mod(&toks, i) {
            children
                .entry(nest.module.clone())
                .or_default()
                .insert(mod_name.to_string());
        }
        if let Some(next) = nest.step(&toks, i) {
            i = next;
            continue;
        }
        match &toks[i] {
            Tok::Punct('#') if ident(i + 2) == Some("path") => {
                // `#[path = "x.rs"]`: the literal was stripped, so read it from the source.
                pending_path = Some(String::new());
            }
            Tok::Ident(k) if k == "mod" && toks.get(i + 2) == Some(&Tok::Punct(';')) => {
                if let Some(n) = ident(i + 1) {
                    children
                        .entry(nest.module.clone())
                        .or_default()
                        .insert(n.into());
                    if pending_path.take().is_some() {
                        path_attrs.push(n.to_string());
                    }
                }
            }
            Tok::Ident(k)
                if matches!(
                    k.as_str(),
                    "struct" | "enum" | "fn" | "const" | "static" | "type" | "trait" | "union"
                ) =>
            {
                if let Some(n) = ident(i + 1) {
                    f.defines.insert(n.to_string());
                }
            }
            Tok::Ident(k) if k == "macro_rules" => {
                if let Some(n) = ident(i + 2) {
                    f.defines.insert(n.to_string());
                }
            }
            _ => {}
        }
        i += 1;
    }
    // Second pass: paths. `imported` maps a name brought in by `use` to its absolute path.
    let mut imported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let no_children = BTreeSet::new();
    let mut nest = Nesting::new(&module);
    let mut i = 0;
    while i < toks.len() {
        if let Some(next) = nest.step(&toks, i) {
            i = next;
            continue;
        }
        let cur_mod = &nest.module;
        let kids = children.get(cur_mod).unwrap_or(&no_children);
        match &toks[i] {
            Tok::Ident(k) if k == "use" => {
                // `pub use`, `pub(crate) use`, `pub(super) use` re-export.
                let public = (i >= 1 && ident(i - 1) == Some("pub"))
                    || (i >= 4 && ident(i - 4) == Some("pub") && toks[i - 1] == Tok::Punct(')'));
                let mut paths = Vec::new();
                let mut j = i + 1;
                if toks.get(j) == Some(&Tok::Path) {
                    j += 1; // `use ::std::…`
                }
                let end = use_tree(&toks, j, &[], &mut paths);
                // The name each path is imported as (the last segment, or the `as` name).
                for p in paths {
                    let Some(abs) = absolute(cur_mod, &p, kids) else {
                        continue;
                    };
                    if let Some(n) = abs.last().filter(|n| *n != "*") {
                        imported.insert(n.clone(), abs.clone());
                    }
                    if public {
                        match abs.last().map(String::as_str) {
                            Some("*") => f.glob_reexports.push(abs[..abs.len() - 1].to_vec()),
                            Some(n) => {
                                f.reexports.insert(n.to_string(), abs.clone());
                            }
                            None => {}
                        }
                    }
                    f.refs.push(abs);
                }
                i = end.max(i + 1);
                continue;
            }
            Tok::Ident(k) if k == "impl" => {
                // `impl<..> Type<..> {`: an inherent impl; `impl Trait for Type` is not.
                let mut j = i + 1;
                if toks.get(j) == Some(&Tok::Punct('<')) {
                    j = skip_angle(&toks, j);
                }
                let mut p = Vec::new();
                while let Some(n) = ident(j) {
                    p.push(n.to_string());
                    j += 1;
                    if toks.get(j) == Some(&Tok::Path) {
                        j += 1;
                    } else {
                        break;
                    }
                }
                if toks.get(j) == Some(&Tok::Punct('<')) {
                    j = skip_angle(&toks, j);
                }
                let inherent =
                    matches!(toks.get(j), Some(Tok::Punct('{'))) || ident(j) == Some("where");
                if inherent && !p.is_empty() {
                    let abs = if p.len() == 1 {
                        imported.get(&p[0]).cloned()
                    } else {
                        absolute(cur_mod, &p, kids)
                    };
                    if let Some(abs) = abs {
                        f.impls.push(abs);
                    }
                }
                i = j;
                continue;
            }
            Tok::Ident(k)
                if (k == "crate" || k == "super" || k == "self" || kids.contains(k))
                    && toks.get(i + 1) == Some(&Tok::Path)
                    && !(i >= 1 && toks[i - 1] == Tok::Punct('$'))
                    // `pub(in crate::x)` names a visibility, not an item.
                    && !(i >= 2 && ident(i - 1) == Some("in") && toks[i - 2] == Tok::Punct('('))
                    && !(i >= 1 && toks[i - 1] == Tok::Path) =>
            {
                let mut p = vec![k.clone()];
                let mut j = i + 1;
                while toks.get(j) == Some(&Tok::Path) {
                    match ident(j + 1) {
                        Some(n) => {
                            p.push(n.to_string());
                            j += 2;
                        }
                        None => break,
                    }
                }
                if let Some(abs) = absolute(cur_mod, &p, kids) {
                    f.refs.push(abs);
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    // `#[path = "…"] mod n;`: read the file names from the source text.
    let mut mapped = Vec::new();
    for n in path_attrs {
        let needle = format!("mod {n};");
        if let Some(at) = src.find(&needle) {
            let before = &src[..at];
            if let Some(p) = before.rfind("#[path") {
                if let Some(lit) = before[p..].split('"').nth(1) {
                    mapped.push((n, lit.to_string()));
                }
            }
        }
    }
    (f, mapped)
}

// ---------------------------------------------------------------------------------------
// The graph.

struct Crate {
    files: Vec<File>,
    /// Module path -> index into `files`.
    by_module: HashMap<Vec<String>, usize>,
}

fn load_crate(root: &Path, krate: &str) -> Crate {
    let src = root.join(krate).join("src");
    let mut rels = Vec::new();
    rs_files(&src, Path::new(""), &mut rels);
    rels.sort();
    let mut files = Vec::new();
    let mut remap: Vec<(PathBuf, Vec<String>)> = Vec::new();
    for rel in &rels {
        let text = std::fs::read_to_string(src.join(rel)).expect("read source");
        let module = module_of(rel);
        let name = format!("{krate}/src/{}", rel.display());
        let (f, mapped) = read_file(name, module.clone(), &text);
        for (n, lit) in mapped {
            let dir = rel.parent().unwrap_or(Path::new(""));
            let mut m = module.clone();
            m.push(n);
            remap.push((dir.join(lit), m));
        }
        files.push((rel.clone(), f));
    }
    // Files reached through `#[path]` are the module that declares them; read them again
    // with that module so their relative paths resolve.
    for (target, m) in remap {
        if let Some((rel, f)) = files.iter_mut().find(|(r, _)| *r == target) {
            let text = std::fs::read_to_string(src.join(&*rel)).expect("read source");
            let name = f.name.clone();
            *f = read_file(name, m, &text).0;
        }
    }
    let files: Vec<File> = files.into_iter().map(|(_, f)| f).collect();
    let by_module = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    Crate { files, by_module }
}

impl Crate {
    /// The file that defines what `path` names: the file of its longest module prefix,
    /// through re-exports to the file that defines the name.
    fn owner(&self, path: &[String], hops: usize) -> Option<usize> {
        let (file, rest) = (0..=path.len()).rev().find_map(|n| {
            self.by_module
                .get(&path[..n])
                .map(|&i| (i, path[n..].to_vec()))
        })?;
        if hops > 8 {
            return Some(file);
        }
        let f = &self.files[file];
        let Some(name) = rest.first() else {
            return Some(file);
        };
        if name == "*" || f.defines.contains(name) {
            return Some(file);
        }
        if let Some(target) = f.reexports.get(name) {
            let mut t = target.clone();
            t.extend(rest[1..].iter().cloned());
            if t != path {
                return self.owner(&t, hops + 1).or(Some(file));
            }
        }
        for g in &f.glob_reexports {
            let mut t = g.clone();
            t.extend(rest.iter().cloned());
            if let Some(o) = self.owner(&t, hops + 1) {
                if o != file && self.files[o].defines.contains(name) {
                    return Some(o);
                }
            }
        }
        Some(file)
    }
}

/// Node name of a file: the file itself, or the module it tests.
fn node_name(c: &Crate, i: usize) -> String {
    let node = &c.files[i].node;
    match c.by_module.get(node) {
        Some(&j) => c.files[j].name.clone(),
        None => c.files[i].name.clone(),
    }
}

/// Strongly connected components (Tarjan), each sorted.
fn sccs(nodes: &BTreeSet<String>, edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    let idx: HashMap<&String, usize> = nodes.iter().enumerate().map(|(i, n)| (n, i)).collect();
    let names: Vec<&String> = nodes.iter().collect();
    let mut adj = vec![Vec::new(); nodes.len()];
    for (a, b) in edges {
        adj[idx[a]].push(idx[b]);
    }
    struct St {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(v: usize, adj: &[Vec<usize>], s: &mut St) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on[v] = true;
        for &w in &adj[v] {
            match s.index[w] {
                None => {
                    visit(w, adj, s);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on[w] => s.low[v] = s.low[v].min(iw),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let n = nodes.len();
    let mut s = St {
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(v, &adj, &mut s);
        }
    }
    let mut out: Vec<Vec<String>> = s
        .out
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut v: Vec<String> = c.into_iter().map(|i| names[i].clone()).collect();
            v.sort();
            v
        })
        .collect();
    out.sort();
    out
}

/// The debt found today: `cycle a -> b` and `up a -> b` lines, and a report to print.
fn analyse(root: &Path) -> (BTreeSet<String>, String) {
    let mut found = BTreeSet::new();
    let mut report = String::new();
    for krate in CRATES {
        let c = load_crate(root, krate);
        let mut nodes = BTreeSet::new();
        let mut edges = BTreeSet::new();
        let mut up = BTreeSet::new();
        for (i, f) in c.files.iter().enumerate() {
            let from = node_name(&c, i);
            nodes.insert(from.clone());
            for r in &f.refs {
                let Some(o) = c.owner(r, 0) else { continue };
                let to = node_name(&c, o);
                if to == from {
                    continue;
                }
                let to_node = &c.files[o].node;
                if to_node.len() < f.node.len() && f.node.starts_with(to_node) {
                    up.insert((from.clone(), to.clone()));
                }
                edges.insert((from.clone(), to));
            }
            for t in &f.impls {
                let Some(o) = c.owner(t, 0) else { continue };
                let owner = node_name(&c, o);
                if owner != from {
                    edges.insert((owner, from.clone()));
                }
            }
        }
        let comps = sccs(&nodes, &edges);
        for comp in &comps {
            report += &format!("cycle of {} files in {krate}:\n", comp.len());
            for n in comp {
                report += &format!("  {n}\n");
            }
            let set: BTreeSet<&String> = comp.iter().collect();
            for (a, b) in &edges {
                if set.contains(a) && set.contains(b) {
                    found.insert(format!("cycle {a} -> {b}"));
                }
            }
        }
        for (a, b) in &up {
            report += &format!("upward import: {a} -> {b}\n");
            found.insert(format!("up {a} -> {b}"));
        }
    }
    (found, report)
}

fn allow_list() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/module_graph_allow.txt");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[test]
fn no_new_import_cycle_or_upward_import() {
    let (found, report) = analyse(&root());
    println!("{report}");
    let allowed = allow_list();
    let new: Vec<&String> = found.difference(&allowed).collect();
    let gone: Vec<&String> = allowed.difference(&found).collect();
    let mut msg = String::new();
    if !new.is_empty() {
        msg += "new import cycles or upward imports (break them; do not list them):\n";
        for l in &new {
            msg += &format!("  {l}\n");
        }
    }
    if !gone.is_empty() {
        msg += "debt paid: delete these lines from xtask/tests/module_graph_allow.txt:\n";
        for l in &gone {
            msg += &format!("  {l}\n");
        }
    }
    assert!(msg.is_empty(), "{report}\n{msg}");
}

/// Prints the list as it would be written today (for the first version of the file).
#[test]
#[ignore]
fn print_allow_list() {
    let (found, _) = analyse(&root());
    for l in found {
        println!("{l}");
    }
}

#[test]
fn the_parser_sees_uses_paths_and_reexports() {
    let src = r#"
        //! use crate::nothing;
        use super::a::{b, c::D as E, self};
        use crate::x::*;
        pub(crate) use self::kid::Thing;
        mod kid;
        pub(in crate::vis) struct S;
        fn f() { let s = "crate::not::this"; crate::y::z(); kid::g(); super::super::w::V; }
        use crate::engine::Engine;
        impl Engine { fn more(&self) {} }
        impl<T: Copy> fmt::Display for Engine { }
        #[cfg(test)]
        mod tests { use super::*; fn t() { super::kid::g(); } }
    "#;
    let m = vec!["p".to_string(), "q".to_string()];
    let (f, _) = read_file("t.rs".into(), m, src);
    let refs: BTreeSet<String> = f.refs.iter().map(|r| r.join("::")).collect();
    for want in [
        "p::a::b",
        "p::a::c::D",
        "p::a",
        "x::*",
        "p::q::kid::Thing",
        "y::z",
        "p::q::kid::g",
        "w::V",
        "p::q::*",
    ] {
        assert!(refs.contains(want), "{want} in {refs:?}");
    }
    assert!(!refs
        .iter()
        .any(|r| r.contains("nothing") || r.contains("not") || r.contains("vis")));
    assert_eq!(f.reexports["Thing"].join("::"), "p::q::kid::Thing");
    assert!(f.defines.contains("f"));
    let impls: Vec<String> = f.impls.iter().map(|r| r.join("::")).collect();
    assert_eq!(impls, ["engine::Engine"]);
}

#[test]
fn cycles_are_found() {
    let n = |s: &str| s.to_string();
    let nodes: BTreeSet<String> = ["a", "b", "c", "d"].into_iter().map(n).collect();
    let edges: BTreeSet<(String, String)> = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
        .into_iter()
        .map(|(x, y)| (n(x), n(y)))
        .collect();
    assert_eq!(sccs(&nodes, &edges), vec![vec![n("a"), n("b"), n("c")]]);
}
