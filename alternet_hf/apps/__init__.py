"""The applications built on the models, the engine and the analyses: the evaluation of a model on a split, the
offline mini-zoo, the build-up search for an AlterNet, and the Gradio Space."""
