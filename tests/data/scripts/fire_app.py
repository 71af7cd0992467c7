"""python-fire: keyword parameters become --options."""
import fire


def train(lr=3e-4, resume_from=None):
    print(lr, resume_from)


if __name__ == "__main__":
    fire.Fire(train)
