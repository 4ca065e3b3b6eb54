//! Control-plane test kit: a private Postgres database per test, the real `ax-controlplane` and
//! `ax-dataplane` binaries, and an operator session (cookie + CSRF) for the admin API.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::Process;

pub const MASTER_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="; // base64 of 32 ASCII bytes
pub const ADMIN_PASSWORD: &str = "correct horse battery";

/// A fresh database on the local Postgres (127.0.0.1:5432, user postgres); dropped on drop.
pub struct TestDb {
    pub name: String,
    pub url: String,
}

fn psql(db: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", db, "-tAq", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .expect("psql (postgresql-client)");
    assert!(out.status.success(), "psql failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

impl TestDb {
    pub fn create(tag: &str) -> Self {
        let n: u64 =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        let name = format!("ax_t_{tag}_{}_{n}", std::process::id());
        psql("postgres", &format!("CREATE DATABASE {name}"));
        let url = format!("postgres://postgres@127.0.0.1:5432/{name}");
        Self { name, url }
    }

    /// One value (first column of the first row) of a query, as text.
    pub fn query(&self, sql: &str) -> String {
        psql(&self.name, sql)
    }

    /// `pg_dump` of the whole database, as text.
    pub fn dump(&self) -> String {
        let out =
            Command::new("pg_dump").args(["-h", "127.0.0.1", "-U", "postgres", &self.name]).output().expect("pg_dump");
        assert!(out.status.success(), "pg_dump failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-qc"])
            .arg(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name))
            .output();
    }
}

/// Runs a control-plane command to completion; its stdout.
pub fn cp_command(db: &TestDb, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(crate::built("ax-controlplane"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("AX_MASTER_KEY", MASTER_KEY)
        .env("AX_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .expect("run ax-controlplane");
    assert!(out.status.success(), "ax-controlplane {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

pub fn create_operator(db: &TestDb, username: &str, role: &str) {
    cp_command(db, &["admin", "create", username, "--role", role], &[("AX_ADMIN_PASSWORD", ADMIN_PASSWORD)]);
}

pub fn create_node(db: &TestDb, id: &str) -> String {
    cp_command(db, &["node", "create", id], &[])
}

impl Process {
    /// A control plane with the test hooks on; every commit also checks that its incremental
    /// document equals a full read of the tables (`AX_VERIFY_DOCUMENTS`).
    pub fn control_plane(db: &TestDb, dir: &Path, name: &str) -> Self {
        Self::control_plane_with(db, dir, name, &[("AX_TEST_HOOKS", "1"), ("AX_VERIFY_DOCUMENTS", "1")])
    }

    pub fn control_plane_with(db: &TestDb, dir: &Path, name: &str, env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(crate::built("ax-controlplane"));
        cmd.arg("serve")
            .env("DATABASE_URL", &db.url)
            .env("AX_MASTER_KEY", MASTER_KEY)
            .env("AX_COOKIE_SECURE", "0")
            .envs(env.iter().copied());
        Self::spawn(cmd, dir, name)
    }

    pub fn data_plane(cp_url: &str, token: &str, state_dir: &Path, name: &str) -> Self {
        Self::data_plane_with(cp_url, token, state_dir, name, None)
    }

    /// A data plane fed by the control plane, with its own `server` and `metering` sections from
    /// `config`.
    pub fn data_plane_with(cp_url: &str, token: &str, state_dir: &Path, name: &str, config: Option<&Path>) -> Self {
        let mut cmd = Command::new(crate::built("ax-dataplane"));
        cmd.args(["--control-plane", cp_url, "--state-dir"]).arg(state_dir).env("AX_NODE_TOKEN", token);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        Self::spawn(cmd, state_dir, name)
    }
}

/// An operator logged in to a control plane.
pub struct Session {
    pub base: String,
    cookie: String,
    pub csrf: String,
    pub role: String,
    client: reqwest::Client,
}

impl Session {
    pub async fn login(base: &str, username: &str, password: &str) -> Result<Self, reqwest::Response> {
        let client = reqwest::Client::new();
        let resp = client
            .post(format!("{base}/api/v1/login"))
            .json(&serde_json::json!({ "username": username, "password": password }))
            .send()
            .await
            .expect("login request");
        if !resp.status().is_success() {
            return Err(resp);
        }
        let set_cookie = resp.headers().get("set-cookie").and_then(|v| v.to_str().ok()).expect("set-cookie").to_owned();
        assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"), "{set_cookie}");
        let cookie = set_cookie.split(';').next().unwrap_or_default().to_owned();
        let body: Value = resp.json().await.expect("session json");
        Ok(Self {
            base: base.to_owned(),
            cookie,
            csrf: body["csrf_token"].as_str().unwrap_or_default().to_owned(),
            role: body["role"].as_str().unwrap_or_default().to_owned(),
            client,
        })
    }

    /// The `Cookie` header value of this session (`ax_session=…`).
    pub fn cookie(&self) -> String {
        self.cookie.clone()
    }

    /// A request with the session cookie and (for mutations) the CSRF token.
    pub async fn send(&self, method: &str, path: &str, body: Option<&Value>) -> reqwest::Response {
        self.send_with(method, path, body, true).await
    }

    pub async fn send_with(&self, method: &str, path: &str, body: Option<&Value>, csrf: bool) -> reqwest::Response {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.client.request(method, format!("{}{path}", self.base)).header("cookie", &self.cookie);
        if csrf {
            req = req.header("x-csrf-token", &self.csrf);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        req.send().await.expect("admin request")
    }

    /// A call that must succeed; its JSON.
    pub async fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let resp = self.send(method, path, body).await;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        assert!(status.is_success(), "{method} {path} → {status}: {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }
}

/// Polls the node list until `node` applied `version`; the time it took.
pub async fn wait_applied(admin: &Session, node: &str, version: u64, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let nodes = admin.ok("GET", "/api/v1/nodes", None).await;
        let applied = nodes["nodes"]
            .as_array()
            .and_then(|l| l.iter().find(|n| n["id"] == node))
            .and_then(|n| n["applied_version"].as_u64());
        if applied.is_some_and(|a| a >= version) {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "node {node} did not apply version {version} within {within:?}: {nodes}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
