//! Generation checked against kube-proxy's own test fixtures (`kube_proxy`), each mutant
//! against the rules it must break (`mutants`), and in the kernel (`kernel`, root only).
