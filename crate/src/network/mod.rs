//! The Loom network model: a grid of cells `(z, y, x)`, each holding `layers_per_cell` layers.
