pub mod loom_models;
