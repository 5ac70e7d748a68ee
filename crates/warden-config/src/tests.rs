use super::*;

const SOURCE_DOCUMENT: &str = r#"
[default.ai.sandbox]
enabled = true
default_profile = "standard"
max_output_length = 2000 # Truncates long logs to save context

  [default.ai.sandbox.profiles.standard]
  timeout_seconds = 30
  max_memory_mb = 128
  network_enabled = false
  read_only = true # Mandatory for security
  strict_mode = true
  enabled_policies = ["forbidden_imports", "resource_quota"]

    [default.ai.sandbox.profiles.standard.runtime]
    image = "python:3.11-slim"
    command = ["python"]

    [default.ai.sandbox.profiles.standard.policies.forbidden_imports]
    allowed_modules = ["math", "datetime", "json", "random", "string"]

  [default.ai.sandbox.profiles.data_science]
  timeout_seconds = 60
  max_memory_mb = 512
  read_only = true
  enabled_policies = ["resource_quota"]

    [default.ai.sandbox.profiles.data_science.runtime]
    image = "python:3.11-data-science"
    command = ["python"]
"#;

fn err(text: &str) -> String {
    Settings::from_toml(text, "test.toml")
        .unwrap_err()
        .to_string()
}

#[test]
fn the_source_documents_file_works_unchanged() {
    let s = Settings::from_toml(SOURCE_DOCUMENT, "settings.toml").unwrap();
    let standard = s.profile("standard").unwrap();
    assert_eq!(standard.timeout_seconds, 30.0);
    assert_eq!(standard.max_memory_mb, 128);
    assert_eq!(
        standard.runtime.command.as_deref(),
        Some(&["python".to_owned()][..])
    );
    assert_eq!(
        standard.policies.forbidden_imports.allowed_modules,
        ["math", "datetime", "json", "random", "string"]
    );
    assert_eq!(s.profile("data_science").unwrap().max_memory_mb, 512);
}

#[test]
fn the_same_file_without_the_prefix_is_equal() {
    let without = SOURCE_DOCUMENT.replace("default.ai.", "");
    assert_eq!(
        Settings::from_toml(&without, "a").unwrap(),
        Settings::from_toml(SOURCE_DOCUMENT, "b").unwrap()
    );
}

#[test]
fn the_fast_builtin_load_equals_the_checked_one() {
    let checked = Settings::from_toml(DEFAULT_SETTINGS, "built-in settings").unwrap();
    assert_eq!(Settings::builtin(), checked);
}

#[test]
fn builtin_defaults_are_the_source_documents_profiles() {
    let s = Settings::builtin();
    assert_eq!(s.sandbox.default_profile, "standard");
    assert_eq!(s.sandbox.max_output_length, 2000);
    let std = s.profile("standard").unwrap();
    assert_eq!((std.timeout_seconds, std.max_memory_mb), (30.0, 128));
    assert!(!std.network_enabled && std.read_only && std.strict_mode);
    assert_eq!(
        std.enabled_policies,
        ["forbidden_imports", "resource_quota"]
    );
    let ds = s.profile("data_science").unwrap();
    assert_eq!((ds.timeout_seconds, ds.max_memory_mb), (60.0, 512));
    assert_eq!(ds.enabled_policies, ["resource_quota"]);
    // The data-science profile keeps two sandboxes warm, with its libraries imported.
    assert_eq!(ds.pool_size, 2);
    assert_eq!(
        ds.preload_modules,
        ["numpy", "pandas", "matplotlib", "matplotlib.pyplot"]
    );
    assert_eq!((std.pool_size, std.preload_modules.len()), (0, 0));
    // The default profile keeps two one-shot sandboxes held per language, their interpreters
    // started: Python's and node's.
    assert_eq!((std.oneshot_pool_size, ds.oneshot_pool_size), (2, 0));
    let languages = |p| {
        s.oneshot_pool_languages(p)
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(languages(std), ["python", "javascript"]);
    assert!(languages(ds).is_empty());
}

#[test]
fn a_profile_without_pool_keys_has_no_pool() {
    let s = Settings::from_toml("[sandbox.profiles.standard]\n", "t").unwrap();
    let p = s.profile("standard").unwrap();
    assert_eq!((p.pool_size, p.preload_modules.len()), (0, 0));
    assert_eq!(p.oneshot_pool_size, 0);
    assert!(s.oneshot_pool_languages(p).is_empty());
}

#[test]
fn a_one_shot_pool_holds_each_of_its_languages_once_whatever_the_profiles_own() {
    // A bash profile may hold node one-shots: a request names its language.
    let s = Settings::from_toml(
        "[sandbox.profiles.standard]\noneshot_pool_size = 3\noneshot_pool_languages = [\"js\", \"node\", \"javascript\"]\n[sandbox.profiles.standard.runtime]\nlanguage = \"bash\"\n",
        "t",
    )
    .unwrap();
    let p = s.profile("standard").unwrap();
    assert_eq!(
        s.oneshot_pool_languages(p),
        [warden_types::Language::new("javascript").unwrap()]
    );
}

#[test]
fn pool_keys_are_checked_and_named() {
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\npool_size = 33\n"),
        @"test.toml: sandbox.profiles.standard.pool_size: must be at most 32 (each pooled sandbox holds an interpreter)"
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\npool_size = -1\n"),
        @"test.toml: sandbox.profiles.standard.pool_size: invalid value: integer `-1`, expected u32"
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\npool_size = 1\n[sandbox.profiles.standard.runtime]\nlanguage = \"bash\"\n"),
        @"test.toml: sandbox.profiles.standard.pool_size: a pool holds sandboxes with a ready Python context: the profile's runtime.language must be python"
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\npool_size = 1\nnetwork_enabled = true\n"),
        @"test.toml: sandbox.profiles.standard.pool_size: pools are for offline profiles (a waiting networked sandbox would hold an address slot and a resolver): a pool needs network_enabled = false"
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\noneshot_pool_size = 33\n"),
        @"test.toml: sandbox.profiles.standard.oneshot_pool_size: must be at most 32 (each pooled sandbox holds an interpreter)"
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\noneshot_pool_size = 1\noneshot_pool_languages = [\"js\", \"sh\"]\n"),
        @r#"test.toml: sandbox.profiles.standard.oneshot_pool_languages: "sh": one-shot pools hold the interpreters that can wait for their code: python, javascript"#
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\noneshot_pool_languages = [\"cobol\"]\n"),
        @r#"test.toml: sandbox.profiles.standard.oneshot_pool_languages: "cobol": one-shot pools hold the interpreters that can wait for their code: python, javascript"#
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\noneshot_pool_size = 1\nnetwork_enabled = true\n"),
        @"test.toml: sandbox.profiles.standard.oneshot_pool_size: one-shot pools are for offline profiles (a waiting networked sandbox would hold an address slot and a resolver): it needs network_enabled = false"
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\npreload_modules = [\"os; import socket\"]\nenabled_policies = []\n"),
        @r#"test.toml: sandbox.profiles.standard.preload_modules: "os; import socket" is not a module name such as "pandas" or "matplotlib.pyplot""#
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\npreload_modules = [\"socket\"]\nenabled_policies = [\"forbidden_imports\"]\n"),
        @r#"test.toml: sandbox.profiles.standard.preload_modules: "socket" is not in the profile's forbidden_imports allowed_modules (a cell could not import it)"#
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\npreload_modules = [\"json\"]\n[sandbox.profiles.standard.runtime]\nlanguage = \"javascript\"\n"),
        @"test.toml: sandbox.profiles.standard.preload_modules: modules are preloaded into a Python context: the profile's runtime.language must be python"
    );
    // A child of an allowed module is allowed; a pool of an offline Python profile is fine.
    let s = Settings::from_toml(
        "[sandbox.profiles.standard]\npool_size = 3\npreload_modules = [\"json.decoder\"]\nenabled_policies = [\"forbidden_imports\"]\n[sandbox.profiles.standard.policies.forbidden_imports]\nallowed_modules = [\"json\"]\n",
        "t",
    )
    .unwrap();
    assert_eq!(s.profile("standard").unwrap().pool_size, 3);
}

#[test]
fn an_empty_file_gives_the_builtin_profiles() {
    let s = Settings::from_toml("", "empty").unwrap();
    assert!(s.profile("standard").is_some() && s.profile("data_science").is_some());
}

#[test]
fn unknown_keys_name_their_full_path() {
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\ntimeout_secondz = 3\n"),
        @r#"test.toml: sandbox.profiles.standard.timeout_secondz: unknown field `timeout_secondz`, expected one of `timeout_seconds`, `max_memory_mb`, `max_pids`, `cpus`, `max_output_bytes`, `max_file_size_mb`, `workspace_mb`, `max_artifacts`, `max_artifact_mb`, `network_enabled`, `read_only`, `strict_mode`, `enabled_policies`, `runtime_import_check`, `runtime`, `policies`, `backend`, `idle_ttl_seconds`, `max_lifetime_seconds`, `on_idle`, `egress`, `container_runtime`, `pool_size`, `oneshot_pool_size`, `oneshot_pool_languages`, `preload_modules`, `landlock`, `durable`"#
    );
    insta::assert_snapshot!(
        err("[default.ai.sandbox]\nbogus = 1\n"),
        @"test.toml: default.ai.sandbox.bogus: unknown field `bogus`, expected one of `enabled`, `default_profile`, `max_output_length`, `backend`, `profiles`, `runtimes`, `jail`, `kubernetes`, `docker`, `secrets`"
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.p.policies.forbidden_imports]\nallowed = []\n[sandbox]\ndefault_profile='p'\n"),
        @"test.toml: sandbox.profiles.p.policies.forbidden_imports.allowed: unknown field `allowed`, expected `allowed_modules`"
    );
}

#[test]
fn bad_values_name_the_key_and_why() {
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\nmax_memory_mb = \"lots\"\n"),
        @r#"test.toml: sandbox.profiles.standard.max_memory_mb: invalid type: string "lots", expected u64"#
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\ntimeout_seconds = -1\n"),
        @"test.toml: sandbox.profiles.standard.timeout_seconds: must be a number of seconds in [0.001, 86400]"
    );
    // Found by the settings fuzz target: a positive timeout below a nanosecond became a zero
    // timeout, and a size in MiB overflowed when converted to bytes.
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\ntimeout_seconds = 1e-300\n"),
        @"test.toml: sandbox.profiles.standard.timeout_seconds: must be a number of seconds in [0.001, 86400]"
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\nmax_file_size_mb = 9223372036854775807\n"),
        @"test.toml: sandbox.profiles.standard.max_file_size_mb: must be at most 17592186044415"
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\nmax_artifact_mb = 17592186044416\n"),
        @"test.toml: sandbox.profiles.standard.max_artifact_mb: must be at most 17592186044415"
    );
    let at_most = Settings::from_toml(
        "[sandbox.profiles.standard]\nmax_file_size_mb = 17592186044415\ntimeout_seconds = 0.001\n",
        "test.toml",
    )
    .unwrap();
    let limits = at_most.profile("standard").unwrap().limits();
    assert_eq!(limits.max_file_size_bytes, 17592186044415 * 1024 * 1024);
    assert_eq!(limits.timeout, Duration::from_millis(1));
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\nread_only = false\n"),
        @"test.toml: sandbox.profiles.standard.read_only: false is not supported: the root filesystem is always read-only (write to the workspace or /tmp)"
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\nenabled_policies = [\"no_such\"]\n"),
        @r#"test.toml: sandbox.profiles.standard.enabled_policies: unknown policy "no_such" (known: forbidden_imports, resource_quota)"#
    );
    insta::assert_snapshot!(
        err("[sandbox]\ndefault_profile = \"x\"\n"),
        @r#"test.toml: sandbox.default_profile: profile "x" is not defined (defined: data_science, standard)"#
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard.runtime]\nlanguage = \"cobol\"\n"),
        @r#"test.toml: sandbox.profiles.standard.runtime.language: no runtime for language "cobol" (known: bash, javascript, python)"#
    );
    assert!(err("[sandbox\n").starts_with("test.toml: invalid TOML"));
}

#[test]
fn runtimes_resolve_by_name_and_alias() {
    let s = Settings::builtin();
    assert_eq!(s.runtime("python").unwrap().0.as_str(), "python");
    assert_eq!(s.runtime("JS").unwrap().0.as_str(), "javascript");
    assert_eq!(s.runtime("sh").unwrap().1.command, ["bash"]);
    assert!(s.runtime("cobol").is_none());
}

#[test]
fn a_file_may_add_a_runtime() {
    let s = Settings::from_toml(
        "[sandbox.runtimes.perl]\ncommand = [\"perl\"]\nfile_name = \"main.pl\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(s.runtime("perl").unwrap().1.file_name, "main.pl");
    assert!(s.runtime("python").is_some());
}

#[test]
fn profile_limits_convert_units() {
    let l = Settings::builtin().profile("standard").unwrap().limits();
    assert_eq!(l.timeout, Duration::from_secs(30));
    assert_eq!(l.max_file_size_bytes, 16 << 20);
}

#[test]
fn the_embedded_file_and_the_code_defaults_agree() {
    // A file without [sandbox.jail] or without some profile key gets the code's defaults; the
    // embedded file spells them out. They must not drift apart.
    let s = Settings::builtin();
    assert_eq!(s.sandbox.jail, JailOptions::default());
    assert_eq!(s.sandbox.kubernetes, KubernetesOptions::default());
    assert_eq!(s.sandbox.docker, DockerOptions::default());
    let standard = s.profile("standard").unwrap();
    let d = Profile::default();
    assert_eq!(
        (
            standard.max_pids,
            standard.cpus,
            standard.max_output_bytes,
            standard.workspace_mb
        ),
        (d.max_pids, d.cpus, d.max_output_bytes, d.workspace_mb)
    );
    assert_eq!(
        (
            standard.max_file_size_mb,
            standard.max_artifacts,
            standard.max_artifact_mb
        ),
        (d.max_file_size_mb, d.max_artifacts, d.max_artifact_mb)
    );
}

#[test]
fn kubernetes_options_parse_and_pick_a_runtime_class_per_profile() {
    let s = Settings::from_toml(
        "[sandbox]\nbackend = \"kubernetes\"\n[sandbox.kubernetes]\nnamespace = \"sbx\"\nruntime_class = \"kata\"\nruntime_classes = { standard = \"gvisor\" }\n",
        "t",
    )
    .unwrap();
    assert_eq!(s.sandbox.backend, BackendKind::Kubernetes);
    let k = &s.sandbox.kubernetes;
    assert_eq!(k.namespace, "sbx");
    assert_eq!(k.runtime_class_for("standard"), Some("gvisor"));
    assert_eq!(k.runtime_class_for("data_science"), Some("kata"));
    assert_eq!(
        KubernetesOptions::default().runtime_class_for("standard"),
        None
    );
}

#[test]
fn bad_kubernetes_options_name_the_key() {
    insta::assert_snapshot!(
        err("[sandbox.kubernetes]\nnamespaces = \"x\"\n"),
        @"test.toml: sandbox.kubernetes.namespaces: unknown field `namespaces`, expected one of `namespace`, `kubeconfig`, `context`, `instance`, `runtime_class`, `runtime_classes`, `pod_ready_timeout_seconds`, `image_pull_policy`, `uid_base`, `uid_count`, `keepalive_command`, `manage_network_policy`, `egress_blocked_cidrs`"
    );
    insta::assert_snapshot!(
        err("[sandbox.kubernetes]\nnamespace = \"Warden_NS\"\n"),
        @"test.toml: sandbox.kubernetes.namespace: must be a DNS label: 1-63 of a-z, 0-9, '-', starting and ending alphanumeric"
    );
    insta::assert_snapshot!(
        err("[sandbox.kubernetes]\nruntime_classes = { nosuch = \"gvisor\" }\n"),
        @r#"test.toml: sandbox.kubernetes.runtime_classes.nosuch: no profile "nosuch" (defined: data_science, standard)"#
    );
    insta::assert_snapshot!(
        err("[sandbox.kubernetes]\nimage_pull_policy = \"sometimes\"\n"),
        @r#"test.toml: sandbox.kubernetes.image_pull_policy: "sometimes": expected "IfNotPresent", "Always" or "Never""#
    );
    insta::assert_snapshot!(
        err("[sandbox.kubernetes]\nuid_base = 0\n"),
        @"test.toml: sandbox.kubernetes.uid_base: must not be 0: sandboxes never run as root"
    );
    insta::assert_snapshot!(
        err("[sandbox.kubernetes]\negress_blocked_cidrs = [\"10.0.0.0\"]\n"),
        @r#"test.toml: sandbox.kubernetes.egress_blocked_cidrs: "10.0.0.0" is not an IPv4 or IPv6 CIDR (address/prefix)"#
    );
    insta::assert_snapshot!(
        err("[sandbox.kubernetes]\npod_ready_timeout_seconds = 0\n"),
        @"test.toml: sandbox.kubernetes.pod_ready_timeout_seconds: must be a number of seconds in (0, 3600]"
    );
    insta::assert_snapshot!(
        err("[sandbox]\nbackend = \"k8s\"\n"),
        @"test.toml: sandbox.backend: unknown variant `k8s`, expected one of `jail`, `docker`, `kubernetes`"
    );
}

#[test]
fn egress_rules_parse_into_domain_types() {
    let s = Settings::from_toml(
        "[sandbox]\ndefault_profile = \"net\"\n[sandbox.profiles.net]\nnetwork_enabled = true\n\
         [sandbox.profiles.net.egress]\nallow_cidrs = [\"203.0.113.0/24\"]\ndeny_cidrs = [\"203.0.113.7\"]\n\
         allow_domains = [\"PyPI.org\", \"*.pythonhosted.org\"]\nmax_bandwidth = \"10mbit\"\n",
        "t",
    )
    .unwrap();
    let e = &s.profile("net").unwrap().egress;
    assert_eq!(e.allow_cidrs[0].to_string(), "203.0.113.0/24");
    assert_eq!(e.deny_cidrs[0].to_string(), "203.0.113.7/32");
    assert!(e.allows_name("files.pythonhosted.org") && e.allows_name("pypi.org"));
    assert_eq!(e.max_bandwidth.unwrap().bits_per_second(), 10_000_000);
    assert_eq!(s.sandbox.jail.network.pool.to_string(), "10.213.0.0/16");
}

#[test]
fn bad_egress_rules_name_the_key() {
    let net = "[sandbox]\ndefault_profile = \"n\"\n[sandbox.profiles.n]\nnetwork_enabled = true\n[sandbox.profiles.n.egress]\n";
    insta::assert_snapshot!(
        err(&format!("{net}allow_cidrs = [\"10.1.2.3/8\"]\n")),
        @r#"test.toml: sandbox.profiles.n.egress.allow_cidrs[0]: invalid CIDR "10.1.2.3/8": host bits set below the prefix"#
    );
    insta::assert_snapshot!(
        err(&format!("{net}allow_domains = [\"a..b\"]\n")),
        @r#"test.toml: sandbox.profiles.n.egress.allow_domains[0]: invalid domain "a..b": every label must have 1 to 63 characters"#
    );
    insta::assert_snapshot!(
        err(&format!("{net}max_bandwidth = \"10mb\"\n")),
        @r#"test.toml: sandbox.profiles.n.egress.max_bandwidth: invalid bandwidth "10mb": the unit must be bit, kbit, mbit or gbit"#
    );
    insta::assert_snapshot!(
        err(&format!("{net}allow = []\n")),
        @"test.toml: sandbox.profiles.n.egress.allow: unknown field `allow`, expected one of `allow_cidrs`, `deny_cidrs`, `allow_domains`, `max_bandwidth`, `secrets`, `gateway`"
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard.egress]\nallow_domains = [\"pypi.org\"]\n"),
        @"test.toml: sandbox.profiles.standard.egress: egress rules apply only to a networked profile: set network_enabled = true"
    );
    insta::assert_snapshot!(
        err("[sandbox.jail.network]\npool = \"10.0.0.0/31\"\n"),
        @"test.toml: sandbox.jail.network.pool: must be an IPv4 range from /8 to /30"
    );
}

#[test]
fn the_landlock_requirement_parses_and_bad_values_name_the_key() {
    use warden_types::landlock::{LandlockPart, LandlockRequirement};
    let builtin = Settings::builtin();
    for p in builtin.sandbox.profiles.values() {
        assert_eq!(p.landlock, LandlockRequirement::Available);
    }
    let s = Settings::from_toml(
        "[sandbox.profiles.strict]\nlandlock = \"all\"\n[sandbox.profiles.net]\nlandlock = [\"filesystem\", \"tcp\"]\n[sandbox]\ndefault_profile = \"strict\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(
        s.profile("strict").unwrap().landlock,
        LandlockRequirement::All
    );
    assert_eq!(
        s.profile("net").unwrap().landlock,
        LandlockRequirement::Parts([LandlockPart::Filesystem, LandlockPart::Tcp].into())
    );
    for (value, why) in [
        ("\"strict\"", "unknown level \"strict\""),
        ("[\"filesystem\", \"udp\"]", "unknown part \"udp\""),
        ("[\"tcp\"]", "must name \"filesystem\""),
        ("true", "\"available\", \"all\" or a list"),
    ] {
        let e = err(&format!(
            "[sandbox.profiles.standard]\nlandlock = {value}\n"
        ));
        assert!(
            e.starts_with("test.toml: sandbox.profiles.standard.landlock: ") && e.contains(why),
            "{value}: {e}"
        );
    }
    insta::assert_snapshot!(
        err("[sandbox.profiles.d]\nbackend = \"docker\"\nlandlock = \"all\"\n[sandbox]\ndefault_profile = \"d\"\n"),
        @r#"test.toml: sandbox.profiles.d.landlock: Landlock is the jail backend's; the docker backend does not use it, so it cannot enforce landlock = "all""#
    );
}

#[test]
fn on_idle_pause_is_refused_where_the_backend_cannot_pause() {
    let s = Settings::from_toml(
        "[sandbox.profiles.p]\non_idle = \"pause\"\n[sandbox]\ndefault_profile = \"p\"\n",
        "test.toml",
    )
    .unwrap();
    assert_eq!(s.sandbox.profiles["p"].on_idle, crate::OnIdle::Pause);
    insta::assert_snapshot!(
        err("[sandbox.profiles.k]\nbackend = \"kubernetes\"\non_idle = \"pause\"\n[sandbox]\ndefault_profile = \"k\"\n"),
        @r#"test.toml: sandbox.profiles.k.on_idle: the kubernetes backend cannot pause a sandbox (no call freezes a pod's processes); use "destroy""#
    );
    assert!(err("[sandbox.profiles.p]\non_idle = \"nap\"\n").contains("on_idle"));
}

#[test]
fn jail_uid_ranges_are_checked() {
    insta::assert_snapshot!(
        err("[sandbox.jail]\nuid_base = 0\n"),
        @"test.toml: sandbox.jail.uid_base: must not be 0: sandboxes never run as root"
    );
    insta::assert_snapshot!(
        err("[sandbox.jail]\nuid_base = 2147483000\nuid_count = 1000\n"),
        @"test.toml: sandbox.jail.uid_count: must be at least 1, with uid_base + uid_count at most 2^31"
    );
    insta::assert_snapshot!(
        err("[sandbox.jail]\nhost_uid = 65534\n"),
        @"test.toml: sandbox.jail.host_uid: unknown field `host_uid`, expected one of `host_paths`, `sandbox_uid`, `sandbox_gid`, `uid_base`, `uid_count`, `fast_cgroup_attach`, `network`"
    );
    let s =
        Settings::from_toml("[sandbox.jail]\nuid_base = 3000000\nuid_count = 10\n", "t").unwrap();
    assert_eq!(
        (s.sandbox.jail.uid_base, s.sandbox.jail.uid_count),
        (3_000_000, 10)
    );
    assert_eq!(s.sandbox.docker.uid_base, DEFAULT_UID_BASE);
}

#[test]
fn docker_options_are_checked() {
    insta::assert_snapshot!(
        err("[sandbox.docker]\nuid_base = 0\n"),
        @"test.toml: sandbox.docker.uid_base: must not be 0: sandboxes never run as root"
    );
    insta::assert_snapshot!(
        err("[sandbox.docker]\nuser = \"65534:65534\"\n"),
        @"test.toml: sandbox.docker.user: unknown field `user`, expected one of `host`, `call_timeout_seconds`, `uid_base`, `uid_count`"
    );
    insta::assert_snapshot!(
        err("[sandbox.docker]\nhost = \"tcp://1.2.3.4:2375\"\n"),
        @"test.toml: sandbox.docker.host: must be a unix socket (unix:///path or /path); TCP engines are not supported yet"
    );
    insta::assert_snapshot!(
        err("[sandbox.docker]\nsocket = \"/x\"\n"),
        @"test.toml: sandbox.docker.socket: unknown field `socket`, expected one of `host`, `call_timeout_seconds`, `uid_base`, `uid_count`"
    );
    insta::assert_snapshot!(
        err("[sandbox.profiles.standard]\ncontainer_runtime = \"run sc\"\n"),
        @r#"test.toml: sandbox.profiles.standard.container_runtime: must be an OCI runtime's name such as "runsc" or "runc""#
    );
    let s = Settings::from_toml(
        "[sandbox.profiles.g]\nbackend = \"docker\"\ncontainer_runtime = \"runsc\"\n[sandbox]\ndefault_profile = \"g\"\n",
        "t",
    )
    .unwrap();
    let g = s.profile("g").unwrap();
    assert_eq!(g.container_runtime.as_deref(), Some("runsc"));
    assert_eq!(s.backend_of(g), BackendKind::Docker);
}

#[test]
fn api_keys_can_come_from_a_second_file() {
    let dir = std::env::temp_dir().join(format!("warden-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.toml");
    let settings = dir.join("settings.toml");
    std::fs::write(
        &keys,
        format!(
            "[[api_keys]]\nname = \"agent\"\nkey_sha256 = \"{}\"\n",
            "a".repeat(64)
        ),
    )
    .unwrap();
    std::fs::write(
        &settings,
        format!(
            "[server]\napi_keys_file = {:?}\n",
            keys.display().to_string()
        ),
    )
    .unwrap();
    let s = Settings::load(&settings).unwrap();
    assert_eq!(s.server.api_keys.len(), 1);
    assert_eq!(s.server.api_keys[0].name, "agent");
    // A bad key in that file is an error naming the file and the key.
    std::fs::write(
        &keys,
        "[[api_keys]]\nname = \"agent\"\nkey_sha256 = \"nope\"\n",
    )
    .unwrap();
    let e = Settings::load(&settings).unwrap_err().to_string();
    assert!(e.contains("keys.toml") && e.contains("key_sha256"), "{e}");
    // A missing file is an error too, never "no keys".
    std::fs::remove_file(&keys).unwrap();
    assert!(Settings::load(&settings).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn durable_is_on_where_it_can_be_and_refused_where_it_cannot() {
    let s = Settings::from_toml(
        "[sandbox.profiles.j]\n[sandbox.profiles.pooled]\npool_size = 1\n[sandbox.profiles.d]\nbackend = \"docker\"\n[sandbox.profiles.off]\ndurable = false\n[sandbox]\ndefault_profile = \"j\"\n",
        "test.toml",
    )
    .unwrap();
    let durable = |name: &str| s.durable(s.profile(name).unwrap());
    assert!(durable("j"));
    assert!(!durable("pooled"));
    assert!(durable("d"));
    assert!(!durable("off"));
    assert_eq!(s.server.data_dir, std::path::Path::new("/var/lib/warden"));
    let builtin = Settings::builtin();
    assert!(builtin.durable(builtin.profile("standard").unwrap()));
    assert!(!builtin.durable(builtin.profile("data_science").unwrap()));
    let docker = Settings::from_toml(
        "[sandbox.profiles.d]\nbackend = \"docker\"\ndurable = true\n[sandbox]\ndefault_profile = \"d\"\n",
        "test.toml",
    )
    .unwrap();
    assert!(docker.durable(docker.profile("d").unwrap()));
    for (toml, why) in [
        (
            "[sandbox.profiles.d]\nbackend = \"kubernetes\"\ndurable = true\n",
            "the kubernetes backend cannot keep",
        ),
        (
            "[sandbox.profiles.d]\npool_size = 1\ndurable = true\n",
            "cannot be durable",
        ),
    ] {
        let e = err(&format!("{toml}[sandbox]\ndefault_profile = \"d\"\n"));
        assert!(
            e.starts_with("test.toml: sandbox.profiles.d.durable: ") && e.contains(why),
            "{e}"
        );
    }
    let e = err("[server]\ndata_dir = \"relative/dir\"\n");
    assert!(e.starts_with("test.toml: server.data_dir: "), "{e}");
}

#[test]
fn gateway_rules_and_brokered_secrets_are_checked_and_named() {
    let net = "[sandbox]\ndefault_profile = \"n\"\n[sandbox.profiles.n]\nnetwork_enabled = true\n";
    let secret = "[sandbox.secrets.api]\nfrom_env = \"API_KEY\"\nhosts = [\"api.example.com\"]\nheader = \"Authorization\"\n";
    insta::assert_snapshot!(
        err(&format!("{net}[sandbox.profiles.n.egress.gateway]\nallow = [\"api.example.com:0\"]\n")),
        @r#"test.toml: sandbox.profiles.n.egress.gateway.allow[0]: invalid domain "api.example.com:0": the port after ':' must be a number from 1 to 65535"#
    );
    insta::assert_snapshot!(
        err(&format!("{net}[sandbox.profiles.n.egress]\nsecrets = [\"nope\"]\n[sandbox.profiles.n.egress.gateway]\n")),
        @r#"test.toml: sandbox.profiles.n.egress.secrets: no secret "nope" in [sandbox.secrets]"#
    );
    insta::assert_snapshot!(
        err(&format!("{net}[sandbox.profiles.n.egress]\nsecrets = [\"api\"]\n{secret}")),
        @"test.toml: sandbox.profiles.n.egress.secrets: needs egress.gateway: only the gateway can put a secret into a request"
    );
    insta::assert_snapshot!(
        err(&format!("{net}{secret}from_file = \"/run/k\"\n")),
        @"test.toml: sandbox.secrets.api: set exactly one of from_env and from_file"
    );
    insta::assert_snapshot!(
        err(&format!("{net}[sandbox.secrets.api]\nvalue = \"x\"\nhosts = []\nheader = \"a\"\n")),
        @"test.toml: sandbox.secrets.api.value: unknown field `value`, expected one of `from_env`, `from_file`, `hosts`, `header`, `env`"
    );
    let ok = format!(
        "{net}[sandbox.profiles.n.egress]\nsecrets = [\"api\"]\n[sandbox.profiles.n.egress.gateway]\nallow = [\"api.example.com:443\"]\n{secret}"
    );
    let s = Settings::from_toml(&ok, "test.toml").unwrap();
    assert_eq!(s.sandbox.profiles["n"].egress.secrets, ["api"]);
}

#[test]
fn executions_at_once_default_to_twice_the_cpus_and_a_setting_overrides_it() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(Settings::embedded().server.max_concurrent(), 2 * cpus);
    let told = Settings::from_toml("[server]\nmax_concurrent = 3\n", "test.toml").unwrap();
    assert_eq!(told.server.max_concurrent(), 3);
    assert_eq!(
        err("[server]\nmax_concurrent = 0\n"),
        "test.toml: server.max_concurrent: must be at least 1"
    );
}
