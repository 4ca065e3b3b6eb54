//! The configuration as data planes see it: composed from the tables (`store::config`) into one
//! `ax_protocol::snapshot::Document`, validated with the rules every data plane applies before any
//! change commits, and versioned (`store::versions`: the document without upstream keys, its hash,
//! the author). Every mutation runs in one transaction that ends in `commit`, which takes a
//! transaction-scoped advisory lock so versions are strictly ordered across control-plane
//! replicas, and NOTIFYs `ax_config` so every replica pushes the new version to its data planes.

use ax_protocol::snapshot::Document;
use sha2::{Digest, Sha256};
use sqlx::PgConnection;

use crate::error::{ApiError, ApiResult, FieldError};
use crate::store::config::{self as tables, StoredRoute};
use crate::store::versions;

/// Reads the tables into a document, without upstream keys (they travel beside it:
/// `store::config::upstream_keys`).
pub async fn load(conn: &mut PgConnection) -> ApiResult<Document> {
    let upstreams = tables::load_upstreams(conn, None).await?.into_iter().map(|(u, _)| u).collect();
    let routes = tables::load_routes(conn, None).await?.into_iter().map(StoredRoute::live).collect();
    let tenants = tables::load_tenants(conn, None).await?;
    let groups = tables::load_groups(conn).await?;
    Ok(Document { upstreams, routes, tenants, groups })
}

/// The document the tables hold now. After a change to one route or one tenant (`focus`), it is
/// the latest version with that entity re-read (10,000 aliases: one row instead of 30,000); any
/// other change, or no stored version, reads every table. Both give the same document: every
/// change to the tables ends in `commit` in the same transaction, so the latest version is the
/// tables as they were before this change (with `AX_VERIFY_DOCUMENTS=1`, as in the tests, `commit`
/// checks that against a full read).
pub async fn current(conn: &mut PgConnection, focus: Focus<'_>) -> ApiResult<Document> {
    if matches!(focus, Focus::Route(_) | Focus::Tenant(_) | Focus::Key(..)) {
        if let Some(mut doc) = versions::latest(conn).await? {
            refresh(conn, &mut doc, focus).await?;
            return Ok(doc);
        }
    }
    load(conn).await
}

/// The live configuration: the latest version (the tables, when none is stored yet).
pub async fn live(conn: &mut PgConnection) -> ApiResult<Document> {
    match versions::latest(conn).await? {
        Some(doc) => Ok(doc),
        None => load(conn).await,
    }
}

/// Re-reads the focused route or tenant from the tables into `doc` (anything else: every table).
pub async fn refresh(conn: &mut PgConnection, doc: &mut Document, focus: Focus<'_>) -> ApiResult<()> {
    match focus {
        Focus::Route(alias) => {
            let fresh = tables::load_routes(conn, Some(alias)).await?.into_iter().map(StoredRoute::live).next();
            replace_sorted(&mut doc.routes, alias, fresh, |r| &r.alias);
        }
        Focus::Tenant(id) | Focus::Key(id, _) => {
            let fresh = tables::load_tenants(conn, Some(id)).await?.into_iter().next();
            replace_sorted(&mut doc.tenants, id, fresh, |t| &t.id);
        }
        Focus::None | Focus::Upstream(_) | Focus::Group(_) => *doc = load(conn).await?,
    }
    Ok(())
}

/// Puts `item` where `name` sorts in `list` (sorted by `key` in byte order, as the tables are
/// read), replacing the entry of that name; `None` removes it. The entry is found by a scan, not
/// by its sorted position: a version stored by an older build may be in another order.
fn replace_sorted<T>(list: &mut Vec<T>, name: &str, item: Option<T>, key: impl Fn(&T) -> &String) {
    match (list.iter().position(|x| key(x).as_str() == name), item) {
        (Some(i), Some(it)) => list[i] = it,
        (Some(i), None) => {
            list.remove(i);
        }
        (None, Some(it)) => {
            let at = list.partition_point(|x| key(x).as_str() < name);
            list.insert(at, it);
        }
        (None, None) => {}
    }
}

/// Validates a document with the rules every data plane applies (`ax_protocol::validate`): what
/// passes here, every data plane accepts. The document is moved in and handed back (not copied:
/// 10,000 aliases).
pub fn validate(doc: Document) -> (Result<(), Vec<FieldError>>, Document) {
    let Document { upstreams, routes, tenants, groups } = doc;
    let spec = ax_protocol::config::ConfigSpec { upstreams, routes, tenants, groups, ..Default::default() };
    // `${NAME}` references are resolved on each data plane; here any name resolves.
    let result = ax_protocol::validate::validate_all(&spec, &|_| Some("x".to_owned()))
        .map(drop)
        .map_err(|all| all.into_iter().map(|e| FieldError::new(e.path, e.message)).collect());
    let ax_protocol::config::ConfigSpec { upstreams, routes, tenants, groups, .. } = spec;
    (result, Document { upstreams, routes, tenants, groups })
}

/// An upstream's own problems (the rules that need nothing else of the document), every one, with
/// paths relative to it. Checked before its rows are written: two models of one name would break
/// the table's key (a 500), not answer 422.
pub fn check_upstream(u: &ax_protocol::config::UpstreamSpec) -> Result<(), Vec<FieldError>> {
    let spec = ax_protocol::config::ConfigSpec { upstreams: vec![u.clone()], ..Default::default() };
    ax_protocol::validate::validate_all(&spec, &|_| Some("x".to_owned())).map(drop).map_err(|all| {
        all.into_iter()
            .map(|e| {
                let path = e.path.strip_prefix("upstreams[0]").map(|r| r.trim_start_matches('.').to_owned());
                FieldError::new(path.unwrap_or(e.path), e.message)
            })
            .collect()
    })
}

/// Ends a mutation: validates the whole resulting configuration (422 naming the field if it
/// would not compile; the caller's transaction is then dropped, so nothing changes), stores a new
/// version and notifies every control-plane replica. Returns the new version.
/// With `verify` (`AX_VERIFY_DOCUMENTS=1`, as in the tests) the incremental document is checked
/// against a full read of the tables.
pub async fn commit(
    conn: &mut PgConnection,
    author: &str,
    summary: &str,
    focus: Focus<'_>,
    verify: bool,
) -> ApiResult<i64> {
    let ms = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1000.0;
    let t = std::time::Instant::now();
    versions::lock(conn).await?;
    let lock_ms = ms(t);
    let t = std::time::Instant::now();
    let doc = current(conn, focus).await?;
    if verify {
        let full = load(conn).await?;
        if full != doc {
            return Err(ApiError::internal("document", "the incremental document differs from the tables"));
        }
    }
    let load_ms = ms(t);
    let t = std::time::Instant::now();
    let (valid, doc) = validate(doc);
    valid.map_err(|all| ApiError::invalid(all.into_iter().map(|f| focus.rebase(&doc, f)).collect()))?;
    let validate_ms = ms(t);
    let t = std::time::Instant::now();
    let text = serde_json::to_string(&doc).map_err(|e| ApiError::internal("document", e))?;
    let version = versions::insert(conn, &hex::encode(Sha256::digest(text.as_bytes())), &text, author, summary).await?;
    tracing::info!(version, lock_ms, load_ms, validate_ms, store_ms = ms(t), "configuration version stored");
    Ok(version)
}

/// The entity a mutation edited: validation errors inside it get paths relative to the request
/// body (`candidates[0].weight`, not `routes[412].candidates[0].weight`).
#[derive(Clone, Copy)]
pub enum Focus<'a> {
    None,
    Route(&'a str),
    Upstream(&'a str),
    Tenant(&'a str),
    /// A key of a tenant: (tenant, key id).
    Key(&'a str, &'a str),
    Group(&'a str),
}

impl Focus<'_> {
    pub fn rebase(self, doc: &Document, mut f: FieldError) -> FieldError {
        let prefix =
            match self {
                Focus::None => None,
                Focus::Route(a) => doc.routes.iter().position(|r| r.alias == a).map(|i| format!("routes[{i}]")),
                Focus::Upstream(n) => doc.upstreams.iter().position(|u| u.name == n).map(|i| format!("upstreams[{i}]")),
                Focus::Tenant(t) => doc.tenants.iter().position(|x| x.id == t).map(|i| format!("tenants[{i}]")),
                Focus::Key(t, k) => doc.tenants.iter().enumerate().find(|(_, x)| x.id == t).and_then(|(i, x)| {
                    x.keys.iter().position(|y| y.id == k).map(|j| format!("tenants[{i}].keys[{j}]"))
                }),
                Focus::Group(g) => doc.groups.iter().position(|x| x.id == g).map(|i| format!("groups[{i}]")),
            };
        if let Some(rest) = prefix.as_deref().and_then(|p| f.path.strip_prefix(p)) {
            f.path = rest.trim_start_matches('.').to_owned();
        }
        f
    }
}

/// Replaces the routing tables with `doc` (rollback). Upstream keys stay as they are.
pub async fn restore(conn: &mut PgConnection, doc: &Document) -> ApiResult<()> {
    tables::clear_routes(conn).await?;
    for r in &doc.routes {
        let candidates: Vec<_> = r.candidates.iter().map(|c| (c.clone(), c.weight > 0)).collect();
        tables::write_route(conn, r, &candidates).await?;
    }
    tables::clear_models(conn).await?;
    for u in &doc.upstreams {
        tables::write_upstream(conn, u).await?;
    }
    let keep: Vec<String> = doc.upstreams.iter().map(|u| u.name.clone()).collect();
    tables::delete_upstreams_except(conn, &keep).await?;
    for g in &doc.groups {
        tables::write_group(conn, g).await?;
    }
    let keep: Vec<String> = doc.groups.iter().map(|g| g.id.clone()).collect();
    tables::delete_groups_except(conn, &keep).await?;
    for t in &doc.tenants {
        tables::write_tenant(conn, t).await?;
        for k in &t.keys {
            tables::set_key_status(conn, &k.id, k.status).await?;
            tables::set_key_policy(conn, &k.id, &k.limits, &k.alias_limits, &k.budgets).await?;
        }
    }
    Ok(())
}
