//! Keeps the specification and the code in step (spec MR-11.2):
//! * every `MR-c.s.n` cited in `src/` or `tests/` names a clause or section
//!   that exists in `Documentation/metaroce/`;
//! * `clause-index.rst` equals the index generated from the chapters
//!   (regenerate with `METAROCE_BLESS=1 cargo test --test spec_clauses`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn ids_in(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(k) = text[i..].find("MR-") {
        let s = i + k + 3;
        let mut e = s;
        while e < b.len()
            && (b[e].is_ascii_digit()
                || (b[e] == b'.' && e + 1 < b.len() && b[e + 1].is_ascii_digit()))
        {
            e += 1;
        }
        if e > s {
            out.push(format!("MR-{}", &text[s..e]));
        }
        i = e.max(s);
    }
    out
}

struct Clause {
    id: String,
    file: String,
    level: &'static str,
}

fn clauses() -> Vec<Clause> {
    let dir = root().join("Documentation/metaroce");
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut v = Vec::new();
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".rst") || name == "clause-index.rst" {
            continue;
        }
        let text = fs::read_to_string(&f).unwrap();
        let paras: Vec<&str> = text.split("\n**[").skip(1).collect();
        for p in paras {
            let Some(end) = p.find("]**") else { continue };
            let id = p[..end].to_string();
            let body = &p[end..];
            let body = &body[..body.find("\n\n").unwrap_or(body.len())];
            let level = if body.contains("MUST") {
                "MUST"
            } else if body.contains("SHOULD") {
                "SHOULD"
            } else if body.contains("MAY") {
                "MAY"
            } else {
                "definition"
            };
            v.push(Clause {
                id,
                file: name.clone(),
                level,
            });
        }
    }
    v
}

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().map(|x| x == "rs").unwrap_or(false) {
            let rel = p.strip_prefix(root()).unwrap().display().to_string();
            out.push((rel, fs::read_to_string(&p).unwrap()));
        }
    }
}

#[test]
fn clause_ids_are_unique_and_cited_ids_exist() {
    let cl = clauses();
    assert!(cl.len() > 100, "only {} clauses found", cl.len());
    let mut seen = BTreeSet::new();
    for c in &cl {
        assert!(seen.insert(c.id.clone()), "duplicate clause {}", c.id);
    }
    let sections: BTreeSet<String> = cl
        .iter()
        .flat_map(|c| {
            let parts: Vec<&str> = c.id.split('.').collect();
            (1..parts.len()).map(move |k| parts[..k].join("."))
        })
        .collect();
    let mut src = Vec::new();
    sources(&root().join("proto/src"), &mut src);
    sources(&root().join("proto/tests"), &mut src);
    let mut missing = Vec::new();
    for (file, text) in &src {
        if file.ends_with("spec_clauses.rs") {
            continue;
        }
        for id in ids_in(text) {
            if !seen.contains(&id) && !sections.contains(&id) {
                missing.push(format!("{file}: {id}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "code cites clauses the spec lacks: {missing:#?}"
    );
}

fn generate() -> String {
    let mut cl = clauses();
    let key = |id: &str| -> Vec<u32> {
        id.trim_start_matches("MR-")
            .split('.')
            .map(|x| x.parse().unwrap_or(0))
            .collect()
    };
    cl.sort_by_key(|c| key(&c.id));
    let mut cites: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    let mut src = Vec::new();
    sources(&root().join("proto/src"), &mut src);
    sources(&root().join("proto/tests"), &mut src);
    for (file, text) in &src {
        if file.ends_with("spec_clauses.rs") {
            continue;
        }
        let short = file.trim_start_matches("proto/").to_string();
        for id in ids_in(text) {
            let e = cites.entry(id).or_default();
            if short.starts_with("src/") {
                e.0.insert(short.clone());
            } else {
                e.1.insert(short.clone());
            }
        }
    }
    let mut s = String::new();
    s.push_str(".. SPDX-License-Identifier: GPL-2.0\n\n");
    s.push_str("=================\nA. Clause index\n=================\n\n");
    s.push_str(".. Generated by proto/tests/spec_clauses.rs; do not edit by hand.\n\n");
    let (mut n_must, mut n_cited) = (0, 0);
    for c in &cl {
        if c.level == "MUST" {
            n_must += 1;
        }
        if cites.get(&c.id).map(|e| !e.0.is_empty()).unwrap_or(false) {
            n_cited += 1;
        }
    }
    s.push_str(&format!(
        "{} clauses, {} with MUST; {} cited by the reference core (``proto/src``). \
         Clauses without an implementing citation belong to the driver or the \
         deployment (UDP/IP encapsulation, DSCP, QPN allocation, key policy) or \
         to the conformance process.\n\n",
        cl.len(),
        n_must,
        n_cited
    ));
    s.push_str(".. list-table::\n   :header-rows: 1\n\n   * - Clause\n     - Chapter\n     - Level\n     - Implemented in\n     - Tested in\n");
    for c in &cl {
        let (imp, tst) = cites.get(&c.id).cloned().unwrap_or_default();
        let join = |x: BTreeSet<String>| {
            if x.is_empty() {
                "—".to_string()
            } else {
                x.into_iter().collect::<Vec<_>>().join(", ")
            }
        };
        s.push_str(&format!(
            "   * - {}\n     - :doc:`{}`\n     - {}\n     - {}\n     - {}\n",
            c.id,
            c.file.trim_end_matches(".rst"),
            c.level,
            join(imp),
            join(tst)
        ));
    }
    s
}

#[test]
fn clause_index_is_current() {
    let path = root().join("Documentation/metaroce/clause-index.rst");
    let want = generate();
    if std::env::var_os("METAROCE_BLESS").is_some() {
        fs::write(&path, &want).unwrap();
        return;
    }
    let have = fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "clause-index.rst is stale: run METAROCE_BLESS=1 cargo test --test spec_clauses"
    );
}
