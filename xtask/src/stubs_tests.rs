use super::*;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

const V44_EFA_MAP: &str = "/* Export symbols ... */
EFA_1.0 {
\tglobal:
\t\tefadv_create_driver_qp;
\tlocal: *;
};

EFA_1.1 {
\tglobal:
\t\tefadv_create_qp_ex;
\t\tefadv_query_ah;
\t\tefadv_query_device;
} EFA_1.0;

EFA_1.2 {
\tglobal:
\t\tefadv_cq_from_ibv_cq_ex;
\t\tefadv_create_cq;
\t\tefadv_wc_read_sgid;
} EFA_1.1;
";

#[test]
fn parse_map_reads_nodes_parents_and_symbols() {
    let map = parse_map(V44_EFA_MAP).expect("rdma-core's map parses");
    let nodes: Vec<&str> = map.values().map(|(n, _)| n.as_str()).collect();
    assert_eq!(nodes, ["EFA_1.0", "EFA_1.1", "EFA_1.2"]);
    let (_, n0) = &map[&("EFA".to_string(), vec![1, 0])];
    assert_eq!(n0.symbols, ["efadv_create_driver_qp"]);
    assert_eq!(n0.parent, None);
    let (_, n2) = &map[&("EFA".to_string(), vec![1, 2])];
    assert_eq!(n2.parent.as_deref(), Some("EFA_1.1"));
    assert_eq!(n2.symbols.len(), 3);
}

#[test]
fn merge_keeps_the_union_and_render_round_trips() {
    let mut map = parse_map(V44_EFA_MAP).expect("parses");
    let newer = parse_map("EFA_1.2 { global: efadv_create_cq; } EFA_1.1;\nEFA_1.3 { global: efadv_query_mr; } EFA_1.2;\n")
        .expect("parses");
    merge(&mut map, newer);
    let text = render_map(&map, "header");
    let again = parse_map(&text).expect("our own output parses");
    assert_eq!(again, map);
    assert_eq!(map.len(), 4);
    assert_eq!(text.matches("local: *;").count(), 1);
    assert!(text.contains("EFA_1.3 { global: efadv_query_mr; } EFA_1.2;"));
}

#[test]
fn inline_header_functions_are_recognised() {
    let headers = vec![
        "int efadv_query_device(struct ibv_context *c);\nstatic inline int efadv_wc_read_sgid(struct efadv_cq *cq,\n union ibv_gid *g)\n{ return 0; }\nint _mlx5dv_query_port(void *c);\nstatic inline int mlx5dv_query_port(void *c)\n{\n\treturn _mlx5dv_query_port(c);\n}\n".to_string(),
    ];
    assert!(defined_inline(&headers, "efadv_wc_read_sgid"));
    assert!(!defined_inline(&headers, "efadv_query_device"));
    assert!(!defined_inline(&headers, "_mlx5dv_query_port"));
    assert!(defined_inline(&headers, "mlx5dv_query_port"));
}

/// (version node, symbol) of every function a shared object defines, from `objdump -T`;
/// a compat version prints in parentheses.
fn defined_functions(lib: &Path) -> BTreeSet<(String, String)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("objdump runs (binutils is installed with gcc)");
    assert!(out.status.success(), "objdump -T {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" DF ") && !l.contains("*UND*"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ver, sym) = (f.get(f.len().checked_sub(2)?)?, f.last()?);
            Some((ver.trim_matches(['(', ')']).to_string(), sym.to_string()))
        })
        .collect()
}

/// Compiles the stand-ins the way `cargo xtask shim` does, into a fresh folder.
fn build_stubs() -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rdma-emu-stubs-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (name, soname, _) in STUBS {
        crate::shim::compile_stub(name, soname, &dir).expect("the stand-in builds");
    }
    dir
}

fn map_entries(name: &str) -> BTreeSet<(String, String)> {
    let path = crate::workspace_root().join(format!("verbs-shim/stubs/{name}.map"));
    let text = std::fs::read_to_string(&path).expect("committed map");
    let map = parse_map(&text).expect("committed map parses");
    map.values()
        .flat_map(|(node, n)| n.symbols.iter().map(move |s| (node.clone(), s.clone())))
        .collect()
}

#[test]
fn stand_ins_export_every_name_of_their_map_under_its_node() {
    let dir = build_stubs();
    for (name, soname, _) in STUBS {
        let exported = defined_functions(&dir.join(soname));
        let map = map_entries(name);
        assert!(map.len() > 5, "{name}.map lists its names");
        let missing: Vec<_> = map.difference(&exported).collect();
        assert!(missing.is_empty(), "{soname} lacks {missing:?}");
        let extra: Vec<_> = exported.difference(&map).collect();
        assert!(
            extra.is_empty(),
            "{soname} exports more than its map: {extra:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stand_ins_cover_the_real_libraries_installed_here() {
    let dir = build_stubs();
    let mut checked = 0;
    for (_, soname, _) in STUBS {
        let real = Path::new("/usr/lib/x86_64-linux-gnu").join(soname);
        if !real.exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{} is missing (Debian's ibverbs-providers installs it)",
                real.display()
            );
            eprintln!("skipped: {} is not installed", real.display());
            continue;
        }
        let want = defined_functions(&real);
        assert!(want.len() > 5, "{} exports its functions", real.display());
        let have = defined_functions(&dir.join(soname));
        let missing: Vec<_> = want.difference(&have).collect();
        assert!(
            missing.is_empty(),
            "{soname} lacks {missing:?} of the real library"
        );
        checked += 1;
    }
    eprintln!("{checked} real libraries compared");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stand_ins_answer_as_for_a_device_of_another_vendor() {
    let dir = build_stubs();
    let prog = r#"
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
bool mlx5dv_is_supported(void *dev);
void *mlx5dv_open_device(void *dev, void *attr);
int mlx5dv_query_device(void *ctx, void *attrs);
int mlx5dv_init_obj(void *obj, uint64_t type);
int mlx5dv_reserved_qpn_alloc(void *ctx, uint32_t *qpn);
int mlx5dv_dump_dr_domain(void *fout, void *dmn);
long mlx5dv_devx_get_event(void *ch, void *data, unsigned long len);
void *efadv_create_qp_ex(void *ctx, void *attr, void *efa, uint32_t inlen);
int efadv_query_device(void *ctx, void *attr, uint32_t inlen);
int efadv_get_max_sq_depth(void *ctx, void *attr, uint32_t inlen);
int main(void)
{
	uint32_t qpn = 0;
	errno = 0;
	if (mlx5dv_is_supported(NULL)) return 1;
	if (mlx5dv_open_device(NULL, NULL) != NULL || errno != EOPNOTSUPP) return 2;
	if (mlx5dv_query_device(NULL, NULL) != EOPNOTSUPP) return 3;
	if (mlx5dv_init_obj(NULL, 0) != EOPNOTSUPP) return 4;
	if (mlx5dv_reserved_qpn_alloc(NULL, &qpn) != EOPNOTSUPP) return 5;
	if (mlx5dv_dump_dr_domain(NULL, NULL) != -EOPNOTSUPP) return 6;
	errno = 0;
	if (mlx5dv_devx_get_event(NULL, NULL, 0) != -1 || errno != EOPNOTSUPP) return 7;
	errno = 0;
	if (efadv_create_qp_ex(NULL, NULL, NULL, 0) != NULL || errno != EOPNOTSUPP) return 8;
	if (efadv_query_device(NULL, NULL, 0) != EOPNOTSUPP) return 9;
	if (efadv_get_max_sq_depth(NULL, NULL, 0) != -EOPNOTSUPP) return 10;
	puts("ok");
	return 0;
}
"#;
    let src = dir.join("conventions.c");
    std::fs::write(&src, prog).expect("write test program");
    let exe = dir.join("conventions");
    let status = Command::new("gcc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg(format!("-L{}", dir.display()))
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .args(["-l:libmlx5.so.1", "-l:libefa.so.1"])
        .status()
        .expect("gcc runs");
    assert!(status.success(), "test program links against the stand-ins");
    let out = Command::new(&exe).output().expect("test program runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "convention check failed: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    let _ = std::fs::remove_dir_all(&dir);
}
