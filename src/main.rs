fn main() {
    for crd in hitl_operator::api::crds() {
        println!("---\n{}", serde_json::to_string_pretty(&crd).unwrap());
    }
}
