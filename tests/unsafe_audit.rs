//! `unsafe` appears only in the files ARCHITECTURE.md lists under "Unsafe code", and every
//! listed file still has some; the `ir` crate forbids it outright.

use std::fs;
use std::path::{Path, PathBuf};

const HEADING: &str = "## Unsafe code";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The paths in the bulleted list under [`HEADING`] (`` - `src/x.rs` — why ``).
fn allowed() -> Vec<String> {
    let text = fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let section = text
        .split_once(&format!("\n{HEADING}\n"))
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no \"{HEADING}\" section"))
        .1;
    let section = section.split("\n#").next().unwrap_or(section);
    let paths: Vec<String> = section
        .lines()
        .filter_map(|line| line.strip_prefix("- `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(path, _)| path.to_string())
        .collect();
    assert!(!paths.is_empty(), "the \"{HEADING}\" section lists no path");
    paths
}

/// Every `.rs` file under `dir`, as paths relative to the repository root.
fn rust_files(dir: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root()).unwrap();
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// `src` with comments and the contents of string and char literals blanked out, so that
/// only code remains.
fn code_only(src: &str) -> String {
    let s = src.as_bytes();
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    // Blanks `s[from..to]`, keeping newlines.
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        out.extend(
            s[from..to]
                .iter()
                .map(|&b| if b == b'\n' { b'\n' } else { b' ' }),
        );
    };
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    while i < s.len() {
        let rest = &s[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .map_or(s.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < s.len() {
                if s[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if s[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some((prefix, hashes)) =
            raw_string_start(rest).filter(|_| i == 0 || !ident(s[i - 1]))
        {
            // r"...", r#"..."# (any number of #), br"...".
            let close: Vec<u8> = std::iter::once(b'"').chain(vec![b'#'; hashes]).collect();
            let body = i + prefix + hashes + 1;
            let end = s[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(s.len(), |p| body + p + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != b'"' {
                j += if s[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(s.len());
            blank(&mut out, i, end);
            i = end;
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime ('a), which stays.
            let end = if rest.get(1) == Some(&b'\\') {
                // The escaped char, then the closing quote.
                rest.get(3..)
                    .and_then(|r| r.iter().position(|&b| b == b'\''))
                    .map(|p| i + 3 + p + 1)
            } else {
                src[i + 1..].chars().next().and_then(|c| {
                    let after = i + 1 + c.len_utf8();
                    (s.get(after) == Some(&b'\'')).then_some(after + 1)
                })
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => {
                    out.push(b'\'');
                    i += 1;
                }
            }
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The length of a raw string's prefix (`r` or `br`) and its number of `#`, if `rest`
/// starts one.
fn raw_string_start(rest: &[u8]) -> Option<(usize, usize)> {
    let prefix = if rest.starts_with(b"br") {
        2
    } else if rest.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = rest[prefix..].iter().take_while(|&&b| b == b'#').count();
    (rest.get(prefix + hashes) == Some(&b'"')).then_some((prefix, hashes))
}

/// Line numbers (from 1) where the keyword `unsafe` appears in code.
fn unsafe_lines(src: &str) -> Vec<usize> {
    let code = code_only(src);
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    code.lines()
        .enumerate()
        .filter(|(_, line)| {
            line.match_indices("unsafe").any(|(at, _)| {
                let before = line[..at].chars().next_back();
                let after = line[at + "unsafe".len()..].chars().next();
                !before.is_some_and(ident) && !after.is_some_and(ident)
            })
        })
        .map(|(n, _)| n + 1)
        .collect()
}

#[test]
fn unsafe_only_where_architecture_allows_it() {
    let allowed = allowed();
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    for dir in ["ir/src", "cli/src", "testkit/src"] {
        rust_files(&root().join(dir), &mut files);
    }
    files.sort();
    let mut stray = Vec::new();
    for file in &files {
        let lines = unsafe_lines(&fs::read_to_string(root().join(file)).unwrap());
        if !lines.is_empty() && !allowed.contains(file) {
            stray.push(format!("{file}: lines {lines:?}"));
        }
    }
    assert!(
        stray.is_empty(),
        "unsafe outside the files listed under \"{HEADING}\" in ARCHITECTURE.md:\n{}",
        stray.join("\n")
    );
    for path in &allowed {
        let src = fs::read_to_string(root().join(path))
            .unwrap_or_else(|e| panic!("ARCHITECTURE.md allows unsafe in {path}: {e}"));
        assert!(
            !unsafe_lines(&src).is_empty(),
            "ARCHITECTURE.md allows unsafe in {path}, which has none: drop it from the list"
        );
    }
    let ir = fs::read_to_string(root().join("ir/src/lib.rs")).unwrap();
    assert!(
        code_only(&ir).contains("#![forbid(unsafe_code)]"),
        "the ir crate must forbid unsafe code"
    );
}

#[test]
fn comments_and_literals_are_not_code() {
    let src = r####"
// unsafe in a comment
/* unsafe /* nested unsafe */ still a comment unsafe */
let a = "unsafe \" unsafe";
let b = r#"unsafe "# ;
let c = br##"unsafe"#unsafe"##;
let d = 'u'; let e = '\''; let u = '\u{75}'; let q = '"'; fn f<'a>(x: &'a u8) {}
#![forbid(unsafe_code)] let not_unsafe = 1; let unsafe_fn = 2;
let g = unsafe { h() };
"####;
    assert_eq!(unsafe_lines(src), [9]);
    let code = code_only(src);
    assert!(code.contains("fn f<'a>(x: &'a u8)"), "{code}");
    assert!(code.contains("let g = unsafe { h() };"), "{code}");
    assert_eq!(code.lines().count(), src.lines().count());
}
