//! No two modules of a crate import each other.
//!
//! A text scan of every `crates/*/src/**/*.rs` (no parser, no build of the
//! crates): it finds which modules of its own crate each file names, and
//! fails listing every pair of sibling modules that name each other, so an
//! import circle cannot come back unnoticed.
//!
//! What counts, exactly:
//! - A file is a module by its path: `src/a.rs` and `src/a/mod.rs` are `a`,
//!   `src/a/b.rs` is `a::b`, `src/lib.rs` and `src/main.rs` the crate root.
//!   Inline modules (`mod tests { .. }`) belong to their file: a test
//!   module's imports are its file's imports.
//! - An import is any path starting `crate::` or `super::` (in `use`
//!   declarations, `use` groups `{..}` included, and in expressions and
//!   types), outside comments (doc links do not count) and string literals.
//!   `super::` resolves to the parent of the module the path is written in
//!   (inline modules count as one level each). The path's leading segments
//!   are followed as far as they name module files; an item a module
//!   re-exports from one of its submodules (`pub use sub::Item;`, groups
//!   included) counts as an import of that submodule, so `crate::Item`
//!   re-exported by the root is the module that defines it.
//! - An importer `m` and the module `t` it imports are compared where their
//!   paths part: below their common ancestor, `m`'s branch imports `t`'s
//!   branch. A module importing its own ancestor or descendant does not
//!   count (a parent re-exports its children; a child uses its parent's
//!   shared items). Two branches of one parent that import each other are a
//!   circle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type ModPath = Vec<String>;

/// One crate's source tree: its module files and what each re-exports.
struct Crate {
    src: PathBuf,
    /// Module path -> its file's text, comments and strings removed.
    files: BTreeMap<ModPath, String>,
    /// Module path -> (re-exported name -> the submodule it comes from).
    reexports: BTreeMap<ModPath, BTreeMap<String, String>>,
}

impl Crate {
    fn load(src: &Path) -> Crate {
        let mut files = BTreeMap::new();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let mut entries: Vec<PathBuf> = fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
                .map(|e| e.expect("dir entry").path())
                .collect();
            entries.sort();
            for path in entries {
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = fs::read_to_string(&path)
                        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
                    let module = module_of(src, &path);
                    let clean = strip(&text);
                    // lib.rs and main.rs are both the root: keep both texts.
                    files
                        .entry(module)
                        .and_modify(|t: &mut String| {
                            t.push('\n');
                            t.push_str(&clean)
                        })
                        .or_insert(clean);
                }
            }
        }
        let mut krate = Crate {
            src: src.to_path_buf(),
            files,
            reexports: BTreeMap::new(),
        };
        let reexports = krate
            .files
            .iter()
            .map(|(m, text)| (m.clone(), krate.reexports_of(m, text)))
            .collect();
        krate.reexports = reexports;
        krate
    }

    fn is_module(&self, m: &[String]) -> bool {
        self.files.contains_key(m)
    }

    /// Names `module`'s file re-exports from its own submodules.
    fn reexports_of(&self, module: &[String], text: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (at, _) in text.match_indices("use ") {
            // Only `pub use` / `pub(..) use`.
            let before = text[..at].trim_end();
            if !(before.ends_with("pub") || before.ends_with(')')) {
                continue;
            }
            let rest = &text[at + 4..];
            let rest = rest
                .trim_start()
                .strip_prefix("self::")
                .unwrap_or(rest.trim_start());
            let Some(end) = rest.find(';') else { continue };
            let decl = &rest[..end];
            let Some(first) = ident_at(decl) else {
                continue;
            };
            let mut child = module.to_vec();
            child.push(first.to_string());
            if !self.is_module(&child) {
                continue;
            }
            for name in leaf_names(decl) {
                out.insert(name, first.to_string());
            }
        }
        out
    }

    /// The module a path names: `base`, then each segment that names a
    /// submodule (or an item re-exported from one).
    fn resolve(&self, mut base: ModPath, segments: &[&str]) -> ModPath {
        for seg in segments {
            let mut next = base.clone();
            next.push(seg.to_string());
            if self.is_module(&next) {
                base = next;
                continue;
            }
            if let Some(child) = self.reexports.get(&base).and_then(|r| r.get(*seg)) {
                base.push(child.clone());
            }
            break;
        }
        base
    }

    /// Every module `module`'s file imports.
    fn imports(&self, module: &[String]) -> BTreeSet<ModPath> {
        let text = &self.files[module];
        let mut out = BTreeSet::new();
        let inline = inline_depths(text);
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < text.len() {
            let starts_word = i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != b'$';
            let after_colons = i >= 2 && &text[i - 2..i] == "::";
            if starts_word && !after_colons {
                let rest = &text[i..];
                let base = if rest.starts_with("crate::") {
                    i += "crate::".len();
                    Some(Vec::new())
                } else if rest.starts_with("super::") {
                    let mut ups = 0;
                    while text[i..].starts_with("super::") {
                        ups += 1;
                        i += "super::".len();
                    }
                    // Inside inline modules, the first `super`s stay in the file.
                    let ups = ups - ups.min(inline_at(&inline, i));
                    (ups > 0 && ups <= module.len()).then(|| module[..module.len() - ups].to_vec())
                } else {
                    None
                };
                if let Some(base) = base {
                    for segs in expand(&text[i..]) {
                        let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
                        out.insert(self.resolve(base.clone(), &segs));
                    }
                    continue;
                }
            }
            i += 1;
        }
        out
    }
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn ident_at(s: &str) -> Option<&str> {
    let s = s.trim_start();
    let end = s.bytes().position(|b| !is_ident(b)).unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// The module path of the file at `path` under `src`.
fn module_of(src: &Path, path: &Path) -> ModPath {
    let rel = path.strip_prefix(src).expect("file under src");
    let mut parts: ModPath = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The segment lists of a path's text (after its `crate::`/`super::`):
/// `a::b::C` is one list, `{a::X, b::{c, d}}` one per leaf.
fn expand(s: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    expand_into(s, &mut Vec::new(), &mut out);
    out
}

fn expand_into(s: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let bytes = s.as_bytes();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < bytes.len() && bytes[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    skip_ws(&mut i);
    if i < bytes.len() && bytes[i] == b'{' {
        i += 1;
        loop {
            skip_ws(&mut i);
            if i >= bytes.len() {
                return i;
            }
            if bytes[i] == b'}' {
                return i + 1;
            }
            if bytes[i] == b',' {
                i += 1;
                continue;
            }
            let before = prefix.len();
            let used = expand_into(&s[i..], prefix, out);
            prefix.truncate(before);
            // Skip an `as name` or anything else up to the next separator.
            i += used.max(1);
            while i < bytes.len() && bytes[i] != b',' && bytes[i] != b'}' {
                i += 1;
            }
        }
    }
    let start = i;
    while i < bytes.len() && is_ident(bytes[i]) {
        i += 1;
    }
    if i == start {
        out.push(prefix.clone());
        return i;
    }
    prefix.push(s[start..i].to_string());
    if s[i..].starts_with("::") {
        return i + 2 + expand_into(&s[i + 2..], prefix, out);
    }
    out.push(prefix.clone());
    i
}

/// The last names a `use` declaration brings in (`a::{B, c::D as E}`:
/// `B`, `D`), `self` and globs left out.
fn leaf_names(decl: &str) -> Vec<String> {
    expand(decl)
        .into_iter()
        .filter_map(|segs| segs.last().cloned())
        .filter(|n| n != "self")
        .collect()
}

/// Byte ranges of inline module bodies (`mod name { .. }`), as
/// (start, end) pairs.
fn inline_depths(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    for (at, _) in text.match_indices("mod ") {
        if at > 0 && is_ident(bytes[at - 1]) {
            continue;
        }
        let rest = &text[at + 4..];
        let Some(name) = ident_at(rest) else { continue };
        let after = rest.trim_start()[name.len()..].trim_start();
        if !after.starts_with('{') {
            continue;
        }
        let open = text.len() - after.len();
        let mut depth = 0usize;
        let mut end = text.len();
        for (j, b) in text.bytes().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((open, end));
    }
    out
}

fn inline_at(ranges: &[(usize, usize)], i: usize) -> usize {
    ranges.iter().filter(|(s, e)| *s < i && i < *e).count()
}

/// `text` without comments, string literals and char literals (each
/// replaced by a space), so only code is scanned.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if text[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if text[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if (rest.starts_with("r#") || rest.starts_with("r\""))
            && (i == 0 || !is_ident(b[i - 1]))
        {
            let hashes = rest[1..].bytes().take_while(|&c| c == b'#').count();
            if rest[1 + hashes..].starts_with('"') {
                let close = format!("\"{}", "#".repeat(hashes));
                let body = 2 + hashes;
                i += body
                    + rest[body..]
                        .find(&close)
                        .map_or(rest.len(), |e| e + close.len());
            } else {
                out.push_str(&rest[..1]);
                i += 1;
                continue;
            }
        } else if rest.starts_with('"') {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if let Some(lit) = rest.strip_prefix('\'') {
            // A char literal ('x', '\n', '"'), or a lifetime ('a).
            let close = if let Some(escaped) = lit.strip_prefix('\\') {
                escaped.find('\'').map(|e| e + 2)
            } else {
                lit.chars().next().map(|c| 1 + c.len_utf8())
            };
            match close {
                Some(c) if rest[c..].starts_with('\'') => i += c + 1,
                _ => {
                    out.push('\'');
                    i += 1;
                    continue;
                }
            }
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            i += c.len_utf8();
            continue;
        }
        out.push(' ');
    }
    out
}

/// Every pair of sibling modules of `krate` that import each other, as
/// `parent: a <-> b` (the files' module paths).
fn circles(krate: &Crate) -> Vec<String> {
    // (parent, from, to) -> an example importer and imported module.
    let mut edges: BTreeMap<(ModPath, String, String), (ModPath, ModPath)> = BTreeMap::new();
    for module in krate.files.keys() {
        for target in krate.imports(module) {
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common == module.len() || common == target.len() {
                continue;
            }
            edges
                .entry((
                    module[..common].to_vec(),
                    module[common].clone(),
                    target[common].clone(),
                ))
                .or_insert((module.clone(), target.clone()));
        }
    }
    let mut out = Vec::new();
    for ((parent, from, to), (m, t)) in &edges {
        if from < to {
            if let Some((m2, t2)) = edges.get(&(parent.clone(), to.clone(), from.clone())) {
                out.push(format!(
                    "{}: `{}` <-> `{}` ({} imports {}; {} imports {})",
                    krate.src.display(),
                    show(&[parent.as_slice(), std::slice::from_ref(from)].concat()),
                    show(&[parent.as_slice(), std::slice::from_ref(to)].concat()),
                    show(m),
                    show(t),
                    show(m2),
                    show(t2),
                ));
            }
        }
    }
    out
}

fn show(m: &[String]) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

fn crate_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut dirs: Vec<PathBuf> = fs::read_dir(&root)
        .expect("crates/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn no_two_modules_of_a_crate_import_each_other() {
    let mut found = Vec::new();
    let mut scanned = 0;
    for dir in crate_dirs() {
        let krate = Crate::load(&dir.join("src"));
        scanned += krate.files.len();
        found.extend(circles(&krate));
    }
    assert!(scanned > 100, "only {scanned} module files found");
    assert!(
        found.is_empty(),
        "modules that import each other (move the shared item to the lower one):\n{}",
        found.join("\n")
    );
}

/// The scanner on a tiny made-up crate: a circle through a `use` group, a
/// `super::` path and a root re-export is found; parent/child imports,
/// comments, strings and inline test modules are not circles.
#[test]
fn the_scanner_finds_circles_and_only_circles() {
    let dir = std::env::temp_dir().join(format!("steer-layering-{}", std::process::id()));
    let src = dir.join("src");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(src.join("a")).unwrap();
    let write = |p: &str, t: &str| fs::write(src.join(p), t).unwrap();
    write("lib.rs", "mod a; mod b; mod c; pub use c::Thing;\n");
    write("a/mod.rs", "mod x; mod y; pub use x::X;\n");
    // a::x -> a::y through a group; a::y -> a::x through super.
    write("a/x.rs", "use super::{y::Y, X};\npub struct X;\n");
    write("a/y.rs", "pub struct Y(super::x::X);\n");
    // b -> c through the root's re-export, c -> b only in a comment and a
    // string, and c's inline test module imports its own file (super::*).
    write("b.rs", "use crate::Thing; use crate::a::X;\n");
    write(
        "c.rs",
        "// crate::b::B\nconst S: &str = \"crate::b\";\npub struct Thing;\n#[cfg(test)] mod tests { use super::*; }\n",
    );
    let krate = Crate::load(&src);
    let found = circles(&krate);
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("`a::x` <-> `a::y`"), "{found:#?}");
    assert_eq!(
        krate.imports(&["b".to_string()]),
        BTreeSet::from([
            vec!["c".to_string()],
            vec!["a".to_string(), "x".to_string()]
        ])
    );
}
