use super::*;

fn spec(local_max_bytes: u64) -> ResponseStoreSpec {
    ResponseStoreSpec { retention_days: 1, max_response_bytes: 100, local_max_bytes }
}

fn resp(id: &str, tenant: &str, previous: Option<&str>, body: &'static str) -> NewResponse {
    NewResponse {
        id: id.to_owned(),
        tenant: tenant.to_owned(),
        previous: previous.map(str::to_owned),
        input: Bytes::from_static(b"\"hi\""),
        response: Bytes::from_static(body.as_bytes()),
        behind: false,
    }
}

#[test]
fn ids_keep_their_conversation() {
    let a = new_id(None);
    let b = new_id(Some(&a));
    assert_eq!(a.len(), 53);
    assert_eq!(parse(&a).map(|p| p.0), parse(&b).map(|p| p.0));
    assert_ne!(a, b);
    assert_ne!(parse(&new_id(Some("resp_nope"))).map(|p| p.0), parse(&a).map(|p| p.0));
    assert!(parse("resp_../../etc").is_none());
}

#[tokio::test]
async fn a_local_chain_is_walked_oldest_first_and_scoped_to_its_tenant() {
    let s = ResponseStore::local(&spec(1 << 20));
    let a = new_id(None);
    let b = new_id(Some(&a));
    s.put(resp(&a, "t1", None, "{\"n\":1}")).await.unwrap();
    s.put(resp(&b, "t1", Some(&a), "{\"n\":2}")).await.unwrap();
    let chain = s.chain("t1", &b, 1 << 20, Some("previous_response_id")).await.unwrap().links;
    assert_eq!(chain.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(), [a.as_str(), b.as_str()]);
    let e = s.chain("t2", &b, 1 << 20, Some("previous_response_id")).await.unwrap_err();
    assert_eq!(e.code(), "response_not_found");
    assert!(matches!(s.chain("t1", &b, 10, None).await, Err(AxError::PayloadTooLarge(10))));
    // Deleting the first link breaks the chain, with a message that says which.
    assert_eq!(s.delete("t2", &a).await.unwrap_err().code(), "response_not_found");
    s.delete("t1", &a).await.unwrap();
    let e = s.chain("t1", &b, 1 << 20, None).await.unwrap_err();
    assert!(e.to_string().contains("deleted or has expired"), "{e}");
    assert_eq!(&s.get("t1", &b).await.unwrap()[..], b"{\"n\":2}");
}

#[tokio::test]
async fn a_conversation_in_use_is_evicted_last() {
    // Room for three of these entries.
    let s = ResponseStore::local(&spec(45));
    let root = new_id(None);
    s.put(resp(&root, "t", None, "0123456789")).await.unwrap();
    let other = new_id(None);
    s.put(resp(&other, "t", None, "0123456789")).await.unwrap();
    // Continuing the first conversation uses its root: the other is evicted before it.
    let next = new_id(Some(&root));
    s.chain("t", &root, 1 << 20, None).await.unwrap();
    s.put(resp(&next, "t", Some(&root), "0123456789")).await.unwrap();
    s.put(resp(&new_id(None), "t", None, "0123456789")).await.unwrap();
    assert!(s.get("t", &other).await.is_err());
    assert_eq!(s.chain("t", &next, 1 << 20, None).await.unwrap().links.len(), 2);
}

#[tokio::test]
async fn the_local_store_evicts_the_oldest_and_marks_what_it_did_not_keep() {
    let s = ResponseStore::local(&spec(30));
    let ids: Vec<String> = (0..4).map(|_| new_id(None)).collect();
    for id in &ids {
        s.put(resp(id, "t", None, "0123456789")).await.unwrap();
    }
    // 14 bytes each, 30 at most: the two newest are kept.
    assert!(s.get("t", &ids[0]).await.is_err());
    assert!(s.get("t", &ids[1]).await.is_err());
    assert!(s.get("t", &ids[3]).await.is_ok());
    let big = new_id(None);
    let body: &'static str = Box::leak("x".repeat(200).into_boxed_str());
    s.put(resp(&big, "t", None, body)).await.unwrap();
    let e = s.get("t", &big).await.unwrap_err();
    assert!(e.to_string().contains("not stored"), "{e}");
}
