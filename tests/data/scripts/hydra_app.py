"""hydra: key=value overrides of the config."""
import hydra


@hydra.main(config_path="conf", config_name="config", version_base=None)
def main(cfg):
    print(cfg.trainer.resume_from)


if __name__ == "__main__":
    main()
