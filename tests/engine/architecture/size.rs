//! The length rule: the hand-written `.rs` files and those over a length.

use std::path::{Path, PathBuf};

/// The longest a source file may be: past it a file holds more than one job (split it along
/// them, `foo.rs` + `foo/`).
pub(super) const MAX_LINES: usize = 500;

/// Every `.rs` file under `dirs` (relative to the package), build output and hidden or
/// vendored folders left out.
pub(super) fn hand_written(dirs: &[&str]) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if path.is_dir() {
                if !(name.starts_with('.') || name == "target" || name == "vendor") {
                    walk(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in dirs {
        walk(&root.join(dir), &mut files);
    }
    files.sort();
    files
}

/// The files of `files` longer than `max` lines, as `path: lines`.
pub(super) fn too_long(files: &[PathBuf], max: usize) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > max).then(|| {
                let rel = f.strip_prefix(root).unwrap_or(f);
                format!("{}: {lines}", rel.display())
            })
        })
        .collect()
}
