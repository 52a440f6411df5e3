"""The installed commands (`setup.cfg` console scripts), one module each:

    alternet-train       train a zoo model (the offline first run with no arguments)
    alternet-evaluate    the paper's metrics of a trained model on a dataset split
    alternet-finetune    fine-tune any zoo model with the HF Trainer
    alternet-analyze     the paper's analyses of one model
    alternet-compare     the analyses of several models (zoo, transformers, timm), figures and the paper's claims
    alternet-reproduce   the offline mini-zoo: a small ResNet, ViT and AlterNet trained on digits and compared
    alternet-convert     a reference checkpoint (.pth.tar) to a zoo model folder
    alternet-push        publish a trained model to the Hub (or --dry-run)
    alternet-publish-cifar100c   the Zenodo CIFAR-100-C arrays as a parquet dataset
    alternet-space       the Gradio Space

Each module imports only the standard library at the top, so `--help` answers at once; the heavy
imports happen in `main()`, after the arguments are parsed.
"""
