//! `deploy/kubernetes/` is generated from the typed objects; this test fails when the
//! committed files differ from a fresh rendering. `WARDEN_UPDATE_MANIFESTS=1` rewrites them
//! (as `warden kube-manifests --out deploy/kubernetes` does).

use std::path::PathBuf;
use warden_kube::manifests::{default_image, render};
use warden_kube::objects::DeployParams;

#[test]
fn committed_manifests_match_the_typed_objects() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes");
    let files = render(&DeployParams::defaults(&default_image())).unwrap();
    if std::env::var_os("WARDEN_UPDATE_MANIFESTS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in &files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }
    let mut committed: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    committed.sort();
    let generated: Vec<String> = files.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(committed, generated, "files in deploy/kubernetes");
    for (name, text) in &files {
        let on_disk = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(
            on_disk == *text,
            "deploy/kubernetes/{name} differs from the typed objects: regenerate with WARDEN_UPDATE_MANIFESTS=1 cargo test -p warden-kube --test manifests"
        );
    }
}

#[test]
fn every_manifest_document_is_a_kubernetes_object() {
    for (name, text) in render(&DeployParams::defaults(&default_image())).unwrap() {
        for doc in text.split("---\n").skip(1) {
            let value: serde_yaml::Value = serde_yaml::from_str(doc).unwrap();
            assert!(value["apiVersion"].is_string(), "{name}: {doc}");
            assert!(value["kind"].is_string(), "{name}: {doc}");
            assert!(value["metadata"]["name"].is_string(), "{name}: {doc}");
        }
    }
}
