"""The demo library's content: 30 papers on three topics, written for Zocrates' demo (the papers,
their authors and their findings are invented; the science they describe is textbook-level and
real enough for questions to have sensible answers).

Plain data, no behaviour: `zocratesd.demo.build()` turns it into a `writer.Library`. Pages of a
full text are separate strings (the writer joins them with form feeds, as Zotero's cache has them).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Paper:
    key: str
    title: str
    authors: tuple[tuple[str, str], ...]
    date: str
    venue: str
    abstract: str
    collections: tuple[str, ...]
    tags: tuple[str, ...] = ()
    item_type: str = "journalArticle"
    pages: tuple[str, ...] = ()  # the PDF's text, page by page; empty: no full text
    note: str | None = None  # a child note (reading notes)
    doi: str | None = None
    extra_fields: dict[str, str] = field(default_factory=dict)


# Collections: (key, name, parent key)
COLLECTIONS: tuple[tuple[str, str, str | None], ...] = (
    ("CRAG2AQX", "Retrieval-Augmented Generation", None),
    ("CRAGEVL4", "Evaluation", "CRAG2AQX"),
    ("CSLP7MEM", "Sleep and Memory", None),
    ("CREF3BLC", "Coral Reefs and Ocean Warming", None),
)

RAG, RAG_EVAL, SLEEP, REEF = "CRAG2AQX", "CRAGEVL4", "CSLP7MEM", "CREF3BLC"

PAPERS: tuple[Paper, ...] = (
    # --- retrieval-augmented generation -----------------------------------------------------------
    Paper(
        "DPR4KRPN", "Dual-Encoder Passage Retrieval for Open-Domain Question Answering",
        (("Mira", "Castellanos"), ("Tobias", "Lindqvist"), ("Aiko", "Morimoto")), "2020",
        "Transactions on Information Retrieval",
        "We show that dense passage retrieval with two independent BERT encoders, one for questions and one "
        "for passages, outperforms BM25 on open-domain question answering. Trained on question-passage pairs "
        "with in-batch negatives, the retriever improves top-20 passage accuracy by 9 to 19 points across "
        "five benchmarks.",
        (RAG,), ("dense retrieval", "question answering"),
        pages=(
            "1 Introduction\nOpen-domain question answering first retrieves a few passages from a large corpus and "
            "then reads them to extract or generate an answer. For decades the retrieval step was lexical: TF-IDF "
            "or BM25 match the words of the question against the words of each passage. Lexical matching fails "
            "when the question and the passage use different words for the same thing. Dense passage retrieval "
            "encodes questions and passages as vectors in one space, so that a question lands near the passages "
            "that answer it even when they share few words.",
            "2 Method\nThe retriever uses two independent BERT encoders: a question encoder and a passage encoder. "
            "The similarity of a question and a passage is the dot product of their 768-dimensional vectors. "
            "All passages of the corpus are encoded once, offline, and stored in an approximate nearest-neighbour "
            "index. Training uses question-passage pairs; for each question, the positive passages of the other "
            "questions in the same batch serve as negatives (in-batch negatives), and one hard negative is taken "
            "from the top BM25 results that do not contain the answer.",
            "3 Results\nOn five open-domain benchmarks, dense retrieval improves top-20 passage accuracy over BM25 by "
            "9 to 19 points. Most of the gain comes from questions whose answer passages paraphrase the question. "
            "BM25 remains better on questions dominated by rare entity names, and a linear combination of both "
            "scores is best overall. Retrieval over 21 million passages takes under 100 ms per question on one GPU.",
        ),
        note="Reading notes\n\nKey idea: two encoders, dot product, in-batch negatives. Compare with the late "
             "interaction paper (token-level vectors) and the BM25 baseline study.",
        doi="10.5555/zdemo.2020.0142",
    ),
    Paper(
        "RAGM7PQW", "Retrieval-Augmented Generation: Combining Parametric and Non-Parametric Memory",
        (("Hannah", "Okafor"), ("Diego", "Serrano"), ("Lena", "Brandt"), ("Samir", "Haddad")), "2020",
        "Advances in Neural Language Systems",
        "Retrieval-augmented generation (RAG) models combine the parametric memory of a pre-trained sequence-to-"
        "sequence model with a non-parametric memory: a dense vector index of Wikipedia accessed by a neural "
        "retriever. RAG models generate more specific, diverse and factual language than a parametric-only "
        "baseline and set new results on three open-domain question answering tasks.",
        (RAG,), ("rag", "generation"),
        pages=(
            "1 Introduction\nLarge pre-trained language models store a surprising amount of factual knowledge in their "
            "parameters, but they cannot easily expand or revise that memory, they cannot show where an answer came "
            "from, and they produce hallucinations. We propose retrieval-augmented generation (RAG), a general recipe "
            "that equips a generator with a non-parametric memory it can read at inference time.",
            "2 Models\nA RAG model has two parts. The retriever finds passages in a dense index of Wikipedia, using a "
            "dual-encoder trained for question answering. The generator is a sequence-to-sequence transformer that "
            "conditions on the input together with the retrieved passages. In RAG-Sequence the same passages support "
            "the whole answer; in RAG-Token each generated token may draw on a different passage. Retriever and "
            "generator are fine-tuned jointly, end to end, without supervision on which passage to retrieve.",
            "3 Findings\nRAG models generate more specific and more factual answers than the same generator without "
            "retrieval. Because the memory is an index, it can be replaced: swapping the 2016 Wikipedia index for a "
            "2018 one updates the model's answers about world leaders without any retraining. Human raters judged RAG "
            "answers more factual in 54% of comparisons and the baseline in 18%.",
        ),
        doi="10.5555/zdemo.2020.0377",
    ),
    Paper(
        "HYDE9ZRT", "Hypothetical Document Embeddings for Zero-Shot Dense Retrieval",
        (("Wen", "Zhao"), ("Priya", "Raman"), ("Jonas", "Weber")), "2022", "Proceedings of the Retrieval Workshop",
        "Hypothetical document embeddings (HyDE) make dense retrieval work without relevance labels. An instruction-"
        "following language model first writes a hypothetical document that answers the query; an unsupervised "
        "contrastive encoder then embeds that document, and its vector retrieves similar real documents from the "
        "corpus. HyDE outperforms an unsupervised dense retriever and is competitive with fine-tuned ones.",
        (RAG,), ("dense retrieval", "zero-shot"),
        pages=(
            "1 Introduction\nDense retrievers need large sets of relevance labels to train, and those labels rarely exist "
            "for a new domain or language. Zero-shot dense retrieval asks how to retrieve well with no labels at all. "
            "Our answer moves the hard part from the encoder to a generator: instead of embedding the query, we embed "
            "a document written to answer it.",
            "2 Method\nHyDE asks a language model to write a hypothetical document that answers the query. The document "
            "may contain false details; it only has to capture relevance patterns, the kind of text a real answer "
            "contains. An unsupervised contrastive encoder embeds the hypothetical document, and the nearest real "
            "documents in the corpus are returned. The encoder's dense bottleneck filters out the hallucinated details, "
            "because they rarely match any real document closely.",
            "3 Results and limits\nWithout any relevance labels, HyDE outperforms the unsupervised contrastive retriever on "
            "web search and low-resource tasks and approaches fine-tuned retrievers. Its limits: every query costs one "
            "generation, which adds latency, and when the language model knows nothing about the topic the hypothetical "
            "document drifts and retrieval degrades below plain BM25.",
        ),
        note="HyDE = generate, then embed. Worth trying for our chemistry corpus, where we have no labels.",
        doi="10.5555/zdemo.2022.0911",
    ),
    Paper(
        "BM25K8LX", "Revisiting BM25: Strong Lexical Baselines for Passage Ranking",
        (("Ruth", "Abernathy"), ("Kofi", "Mensah")), "2021", "Journal of Search Engineering",
        "We revisit BM25 as a baseline for passage ranking. With tuned k1 and b, document expansion and careful "
        "tokenisation, BM25 closes much of the gap to early neural rankers and remains the strongest method on "
        "queries dominated by rare terms, identifiers and names.",
        (RAG,), ("bm25", "baselines"),
    ),
    Paper(
        "COLB5TKN", "Late Interaction over Token Embeddings for Efficient Passage Search",
        (("Nadia", "Petrova"), ("Arjun", "Mehta")), "2020", "Proceedings of the Conference on Information Retrieval",
        "Late interaction keeps one embedding per token for queries and passages and scores a pair by summing, "
        "for each query token, its maximum similarity to any passage token. It matches the quality of cross-"
        "encoders at a fraction of their cost, because passage embeddings are computed offline.",
        (RAG,), ("dense retrieval", "efficiency"),
        pages=(
            "1 Introduction\nCross-encoders read the query and the passage together and rank best, but they must run once "
            "per candidate passage at query time. Dual encoders are fast but compress a passage into a single vector. "
            "Late interaction is a middle ground: it keeps one vector per token.",
            "2 Scoring\nThe score of a passage is the sum over query tokens of the maximum cosine similarity between that "
            "query token and any token of the passage (MaxSim). Passage token embeddings are computed offline and "
            "compressed to 32 bytes each. Query encoding is the only neural step at search time.",
            "3 Results\nLate interaction reaches the ranking quality of a BERT cross-encoder on passage ranking while being "
            "two orders of magnitude faster. The price is storage: an index of token vectors is roughly ten times larger "
            "than a single-vector index of the same corpus.",
        ),
    ),
    Paper(
        "CHNK6SZE", "Chunk Size and Overlap in Retrieval Pipelines: A Systematic Study",
        (("Isabel", "Ferreira"), ("Tomasz", "Kowalczyk"), ("Grace", "Liu")), "2024", "Findings of Applied NLP",
        "How long should the passages of a retrieval-augmented system be? Across four corpora we vary chunk length "
        "from 64 to 1024 tokens and overlap from 0 to 50%. Chunks of 256 to 512 tokens with 10-20% overlap give the "
        "best answer accuracy; smaller chunks lose context and larger ones dilute the retriever's signal.",
        (RAG,), ("chunking", "rag"),
        pages=(
            "1 Motivation\nEvery retrieval-augmented system cuts its documents into passages before indexing them, yet the "
            "chunk size is usually chosen by habit. Chunks that are too small separate a claim from the context that "
            "makes it meaningful; chunks that are too large mix several topics, so one vector represents none of them well.",
            "2 Setup\nWe index four corpora (scientific papers, manuals, news, legal opinions) at chunk lengths of 64, 128, "
            "256, 512 and 1024 tokens, with overlaps of 0, 10, 20 and 50 percent, and measure retrieval recall and final "
            "answer accuracy with the same generator.",
            "3 Findings\nChunks of 256 to 512 tokens with 10 to 20 percent overlap give the best answer accuracy on every "
            "corpus. Splitting at paragraph or page boundaries beats fixed windows by 3 points. Overlap above 20 percent "
            "only inflates the index. Scientific papers favour the longer chunks, because their claims lean on the "
            "surrounding method description.",
        ),
    ),
    Paper(
        "HALU3GRD", "Grounding Reduces Hallucination in Long-Form Answers",
        (("Olivia", "Grant"), ("Mateus", "Oliveira")), "2023", "Journal of Trustworthy Language Technology",
        "We measure how often long-form answers contain unsupported claims with and without retrieved evidence. "
        "Grounding the generator in retrieved passages cuts the rate of unsupported claims from 31% to 12%, but "
        "answers still contradict their own sources when passages disagree with the model's prior knowledge.",
        (RAG_EVAL,), ("hallucination", "evaluation"),
    ),
    Paper(
        "FAIT2CLM", "Measuring Faithfulness of Retrieval-Augmented Answers with Claim-Level Attribution",
        (("Yusuf", "Demir"), ("Clara", "Nilsson"), ("Benedikt", "Hahn")), "2023", "Evaluation in Language Systems",
        "We propose claim-level attribution to evaluate retrieval-augmented answers: an answer is split into atomic "
        "claims, and each claim is checked against the passages the answer cites. Faithfulness is the share of "
        "claims supported by a cited passage. The measure agrees with expert judgements far better than answer-level "
        "overlap metrics.",
        (RAG_EVAL,), ("evaluation", "citations"),
        pages=(
            "1 The problem\nA retrieval-augmented answer can be correct yet unfaithful (right for reasons it does not cite) "
            "or faithful yet wrong (a faithful summary of a wrong passage). Overlap metrics such as ROUGE reward neither "
            "property. Users who read citations need to know whether each statement is backed by the source it points to.",
            "2 Claim-level attribution\nAn answer is split into atomic claims, each a single checkable statement. For every "
            "claim, a judge decides whether a cited passage supports it, contradicts it, or says nothing about it. "
            "Faithfulness is the share of claims supported by at least one cited passage; citation precision is the share "
            "of citations that support the claim they are attached to.",
            "3 Validation\nOn 600 answers rated by domain experts, claim-level faithfulness correlates with expert "
            "judgements at 0.81, against 0.34 for ROUGE-L. The most common failure is a correct claim attached to the "
            "wrong citation, which readers rarely notice.",
        ),
    ),
    Paper(
        "RRNK4XEN", "Cross-Encoder Re-Ranking for Multi-Stage Retrieval",
        (("Felix", "Moreau"), ("Anika", "Sharma")), "2021", "Transactions on Information Retrieval",
        "A multi-stage pipeline retrieves a thousand candidates cheaply with BM25 or a dual encoder, then re-ranks "
        "the top hundred with a cross-encoder that reads query and passage together. Re-ranking adds 6 to 11 points "
        "of precision at 10 for a latency cost of about 40 ms per query on a GPU.",
        (RAG,), ("re-ranking",),
    ),
    Paper(
        "POSN8MDL", "Position Effects When Language Models Read Many Retrieved Passages",
        (("Layla", "Haddad"), ("Erik", "Johansson")), "2023", "Evaluation in Language Systems",
        "When a language model answers from twenty retrieved passages, its accuracy depends on where the relevant "
        "passage sits: it is highest when the passage comes first or last and drops by up to 20 points when it sits "
        "in the middle. Fewer, better-ranked passages beat long contexts.",
        (RAG_EVAL,), ("long context", "evaluation"),
    ),
    # --- sleep and memory ------------------------------------------------------------------------
    Paper(
        "SWS5CNSL", "Slow-Wave Sleep and the Consolidation of Declarative Memory",
        (("Elena", "Marchetti"), ("David", "Adeyemi"), ("Sophie", "Laurent")), "2019", "Journal of Sleep Research Methods",
        "Declarative memories are consolidated during slow-wave sleep. In 48 adults who learned word pairs before a "
        "night in the laboratory, the time spent in slow-wave sleep predicted next-morning recall, and boosting slow "
        "oscillations with closed-loop auditory stimulation improved retention by 12%.",
        (SLEEP,), ("consolidation", "slow-wave sleep"),
        pages=(
            "1 Background\nNew declarative memories, facts and events, are first stored in the hippocampus and are "
            "gradually integrated into neocortical networks. The active systems consolidation account holds that this "
            "transfer happens mainly during slow-wave sleep, when slow oscillations, spindles and hippocampal ripples "
            "are coupled in time.",
            "2 Methods\nForty-eight healthy adults learned 120 word pairs in the evening and were tested before sleep and "
            "the next morning. Sleep was recorded with polysomnography. In a second session, closed-loop auditory "
            "stimulation played short pink-noise clicks in phase with the up-states of slow oscillations.",
            "3 Results\nTime spent in slow-wave sleep predicted overnight retention (r = 0.52). Closed-loop stimulation "
            "increased slow-oscillation amplitude and improved retention of word pairs by 12% compared with sham nights. "
            "Stimulation out of phase had no benefit, which shows that the timing, not the sound, matters.",
        ),
        note="Closed-loop stimulation: in phase works, out of phase does not. Good for the seminar on causality.",
        doi="10.5555/zdemo.2019.0218",
    ),
    Paper(
        "SPND3MTR", "Sleep Spindles Predict Overnight Gains in Motor Sequence Learning",
        (("Marta", "Nowak"), ("Kenji", "Sato")), "2018", "Neurobiology of Learning",
        "Participants who learned a finger-tapping sequence improved by 15% after a night of sleep but not after an "
        "equal time awake. The number of fast sleep spindles over motor cortex during stage 2 sleep predicted the "
        "size of the overnight gain.",
        (SLEEP,), ("spindles", "motor learning"),
        pages=(
            "1 Introduction\nMotor skills such as playing a piano sequence improve between sessions without further "
            "practice, and this offline gain depends on sleep. Sleep spindles, bursts of 11 to 16 Hz activity during "
            "non-REM sleep, are a candidate mechanism because they open windows of plasticity in cortical circuits.",
            "2 Methods\nThirty-six participants learned a five-element finger-tapping sequence. Half were trained in the "
            "evening and retested after a night of sleep; half were trained in the morning and retested after twelve "
            "hours awake. Spindles were detected automatically in the EEG of the sleep group.",
            "3 Results\nSpeed improved by 15% after sleep and by 3% after wakefulness. Fast spindles (13 to 16 Hz) over the "
            "motor cortex contralateral to the trained hand predicted the overnight gain (r = 0.61); slow frontal "
            "spindles did not. Spindles clustered in trains locked to slow-oscillation up-states.",
        ),
    ),
    Paper(
        "RPLY6SWR", "Hippocampal Replay During Sharp-Wave Ripples Links Experience to Cortex",
        (("Anna", "Kowalski"), ("Rafael", "Mendes"), ("Jun", "Park")), "2020", "Systems Neuroscience Letters",
        "Place cells that fired along a maze during the day fire again in the same order during sharp-wave ripples "
        "in later sleep. Disrupting ripples electrically after learning impaired spatial memory the next day, "
        "showing that replay is needed for consolidation.",
        (SLEEP,), ("replay", "hippocampus"),
        pages=(
            "1 Introduction\nDuring exploration, hippocampal place cells fire in sequences that trace the animal's path. "
            "During later rest and sleep, brief high-frequency events called sharp-wave ripples replay these sequences "
            "in compressed form, about twenty times faster than the original experience.",
            "2 Experiments\nRats learned the locations of rewards in a radial maze. In the following sleep, ripples were "
            "detected in real time and, in one group, suppressed by brief electrical stimulation of the hippocampal "
            "commissure. A control group received the same stimulation delayed by 100 ms, outside the ripples.",
            "3 Results\nReplay during ripples reproduced the order of the day's place-cell sequences. Rats whose ripples "
            "were suppressed made 40% more errors the next day than controls. Ripples were followed within 100 ms by "
            "spindle activity in prefrontal cortex, consistent with a dialogue that moves memories from hippocampus to cortex.",
        ),
    ),
    Paper(
        "DPRV8ENC", "One Night of Sleep Deprivation Impairs Encoding of New Episodic Memories",
        (("Claire", "Dubois"), ("Samuel", "Osei")), "2017", "Journal of Cognitive Neuroscience Reports",
        "After one night without sleep, participants remembered 40% fewer new pictures than rested controls. "
        "Functional imaging showed weaker hippocampal activation during encoding, suggesting that sleep before "
        "learning prepares the hippocampus to store new memories.",
        (SLEEP,), ("deprivation", "encoding"),
    ),
    Paper(
        "TMRC4ODR", "Targeted Memory Reactivation with Odour Cues During Non-REM Sleep",
        (("Lucia", "Romano"), ("Henrik", "Berg")), "2021", "Sleep and Cognition",
        "Presenting an odour during learning and again during non-REM sleep strengthened the memories associated "
        "with it. Reactivation during REM sleep or wakefulness had no effect. Targeted memory reactivation offers a "
        "way to bias which memories sleep consolidates.",
        (SLEEP,), ("reactivation", "consolidation"),
        pages=(
            "1 Introduction\nIf sleep consolidates memories by reactivating them, then cueing a memory during sleep should "
            "strengthen it. Targeted memory reactivation pairs a learning episode with a sensory cue, a sound or an "
            "odour, and presents the cue again during sleep.",
            "2 Methods\nForty participants learned the locations of 30 card pairs while a rose odour was present. The odour "
            "was presented again during non-REM sleep, during REM sleep, or during quiet wakefulness, in separate groups; "
            "a fourth group received an odourless air stream.",
            "3 Results\nOdour cues during non-REM sleep improved recall of card locations by 13% relative to the odourless "
            "control. Cues during REM sleep or wakefulness had no effect. Cueing did not wake participants, and none "
            "reported noticing the odour.",
        ),
    ),
    Paper(
        "REMM2EMO", "REM Sleep and the Emotional Tone of Memories",
        (("Noor", "Rahman"), ("Patrick", "Walsh")), "2019", "Affective Neuroscience Review",
        "REM sleep appears to keep the content of emotional memories while softening their emotional charge. "
        "After a night rich in REM sleep, participants rated previously seen negative pictures as less upsetting "
        "while remembering them as well as before.",
        (SLEEP,), ("REM sleep", "emotion"),
    ),
    Paper(
        "NAPS7VOC", "Short Daytime Naps Protect Newly Learned Vocabulary from Interference",
        (("Ines", "Carvalho"), ("Oskar", "Lind"), ("Mei", "Tanaka")), "2022", "Learning and Memory Studies",
        "A 45-minute nap after learning foreign vocabulary protected the new words from interference by a second "
        "list learned afterwards. The benefit depended on spindle density during the nap, not on nap duration.",
        (SLEEP,), ("naps", "language learning"),
        pages=(
            "1 Introduction\nNew memories are fragile: learning similar material soon after can overwrite them. Night sleep "
            "protects memories from such interference; we asked whether a short daytime nap does the same.",
            "2 Methods\nSixty students learned 40 Swahili-English word pairs at noon. Half napped for 45 minutes in the lab, "
            "half watched a documentary. Both groups then learned an interfering list that paired the same Swahili words "
            "with new translations, and were tested on the first list in the evening.",
            "3 Results\nNappers recalled 24% more words of the first list than the wake group. Within the nap group, spindle "
            "density predicted protection from interference, while nap duration and the time spent in slow-wave sleep did "
            "not. A brief nap is enough to stabilise fresh vocabulary.",
        ),
    ),
    Paper(
        "AGSO5OSC", "Age-Related Decline in Slow Oscillations and Memory Retention",
        (("George", "Whitfield"), ("Amara", "Nwosu")), "2020", "Neurobiology of Ageing Reports",
        "Older adults have fewer and weaker slow oscillations than young adults, and the loss predicts their poorer "
        "overnight retention. Atrophy of the medial prefrontal cortex accounts for much of the decline.",
        (SLEEP,), ("ageing", "slow-wave sleep"),
    ),
    Paper(
        "SHYP9DWN", "Synaptic Homeostasis: Why the Sleeping Brain Downscales",
        (("Beatrice", "Conti"),), "2016", "Annual Review of Sleep Biology",
        "The synaptic homeostasis hypothesis proposes that wakefulness strengthens synapses overall and that slow-"
        "wave sleep renormalises them, restoring energy balance and the capacity to learn. We review the evidence "
        "from synapse imaging, electrophysiology and behaviour, and how it fits with active consolidation.",
        (SLEEP,), ("review", "synaptic homeostasis"), item_type="journalArticle",
    ),
    Paper(
        "ADSL3SCH", "Sleep Timing, School Start Times and Adolescent Learning",
        (("Rebecca", "Holm"), ("Tunde", "Bakare")), "2023", "Journal of Educational Health",
        "Delaying school start by 50 minutes gave adolescents 34 more minutes of sleep a night and improved grades in "
        "morning classes. Adolescents' circadian rhythm shifts later in puberty, so early starts cut their sleep short.",
        (SLEEP,), ("adolescents", "education"),
    ),
    # --- coral reefs and ocean warming ----------------------------------------------------------
    Paper(
        "BLCH6HWV", "Marine Heatwaves and Mass Coral Bleaching on the Northern Reef, 2016-2020",
        (("Amelia", "Thornton"), ("Rangi", "Parata"), ("Luis", "Herrera")), "2021", "Coral Reef Ecology",
        "Three marine heatwaves in five years bleached most of the northern reef. Aerial surveys of 1,100 reefs show "
        "that bleaching severity tracked accumulated heat stress, and that reefs bleached in 2016 lost half their "
        "coral cover within a year.",
        (REEF,), ("bleaching", "heatwaves"),
        pages=(
            "1 Introduction\nCoral bleaching is the loss of the symbiotic algae that live in coral tissue and supply most of "
            "the coral's energy. It happens when water temperature stays about 1 degree Celsius above the usual summer "
            "maximum for several weeks. Bleached corals are not dead, but many starve or succumb to disease if the heat lasts.",
            "2 Surveys\nWe surveyed 1,100 reefs from the air during the heatwaves of 2016, 2017 and 2020, scoring each reef "
            "from 0 (no bleaching) to 4 (more than 60% of corals bleached), and resurveyed 160 reefs underwater a year "
            "later to measure coral mortality.",
            "3 Results\nBleaching severity tracked accumulated heat stress: reefs that experienced more than 8 degree heating "
            "weeks were severely bleached almost everywhere. Reefs bleached severely in 2016 lost 51% of their coral cover "
            "within a year, mostly fast-growing branching and plate corals. Protection from fishing and good water quality "
            "did not reduce bleaching; heat was the overwhelming driver.",
        ),
        note="Main message: local management does not prevent bleaching; only limiting warming does. Figure 2 for the talk.",
        doi="10.5555/zdemo.2021.0507",
    ),
    Paper(
        "SYMB8DRS", "Heat Tolerance of Coral Symbionts: Shuffling Toward Durusdinium",
        (("Keiko", "Ishikawa"), ("Marcus", "Feldman")), "2019", "Marine Symbiosis",
        "Corals host several genera of symbiotic algae. After bleaching, some colonies recovered with more heat-"
        "tolerant Durusdinium symbionts and bleached less in the next heatwave, but they grew 30% more slowly.",
        (REEF,), ("symbionts", "adaptation"),
        pages=(
            "1 Introduction\nReef-building corals depend on photosynthetic dinoflagellates of the family Symbiodiniaceae. "
            "The genus Cladocopium dominates most reefs and supports fast coral growth; Durusdinium is rarer but tolerates "
            "heat better.",
            "2 Methods\nWe tagged 240 colonies of a branching coral before a heatwave and genotyped their symbiont "
            "communities before bleaching, during recovery and after a second heatwave two years later.",
            "3 Results\nA third of the recovering colonies had shuffled their symbionts toward Durusdinium. These colonies "
            "bleached 45% less in the second heatwave. The benefit had a cost: corals dominated by Durusdinium grew 30% "
            "more slowly and stored less lipid. Symbiont shuffling buys time but does not keep pace with projected warming.",
        ),
    ),
    Paper(
        "DHWK2MTR", "Degree Heating Weeks as a Predictor of Bleaching Severity",
        (("Sarah", "McAllister"), ("Tomas", "Novak")), "2018", "Remote Sensing of Oceans",
        "Degree heating weeks (DHW), the satellite-derived accumulation of temperatures above the summer maximum over "
        "12 weeks, predict bleaching well: 4 DHW marks the onset of significant bleaching and 8 DHW widespread "
        "bleaching with mortality.",
        (REEF,), ("heat stress", "remote sensing"),
        pages=(
            "1 Definition\nA degree heating week is one week of sea surface temperature 1 degree Celsius above the "
            "climatological maximum monthly mean. Degree heating weeks sum such excess heat over a rolling 12-week window, "
            "counting only days at least 1 degree above the mean.",
            "2 Validation\nWe compared satellite degree heating weeks with 3,400 field observations of bleaching on reefs "
            "across three oceans between 1998 and 2017.",
            "3 Results\nBelow 4 DHW, significant bleaching was rare. Between 4 and 8 DHW most reefs bleached but mortality "
            "was low; above 8 DHW bleaching was widespread and followed by mortality. Local factors, such as turbid water "
            "and cooler upwelling, explained most of the remaining variation.",
        ),
    ),
    Paper(
        "ACID7CLC", "Ocean Acidification Slows Calcification in Branching Corals",
        (("Hiroshi", "Takeda"), ("Alice", "Fontaine")), "2017", "Marine Chemistry Letters",
        "In tank experiments at the carbon dioxide levels projected for 2100, calcification of two branching corals "
        "fell by 20 to 35%. Acidification and warming together were worse than either alone.",
        (REEF,), ("acidification",),
    ),
    Paper(
        "RCVR4WIN", "Recovery Windows: How Often Can Reefs Bleach and Still Recover?",
        (("Daniel", "Okoro"), ("Hana", "Kim"), ("Pieter", "de Vries")), "2022", "Coral Reef Ecology",
        "Reefs need 10 to 15 years without severe disturbance to recover their coral cover after mass bleaching. "
        "The interval between severe heatwaves has shrunk from about 25 years in the 1980s to 6 years today, too "
        "short for full recovery.",
        (REEF,), ("recovery", "resilience"),
        pages=(
            "1 Introduction\nCoral reefs have always been disturbed by storms, predators and heat, and have recovered in "
            "between. The question is no longer whether reefs can recover, but whether they get enough time.",
            "2 Data\nWe compiled 38 years of coral cover surveys from 100 reefs in five regions and identified recovery "
            "trajectories after severe bleaching, cyclones and crown-of-thorns outbreaks.",
            "3 Results\nRecovery to pre-disturbance cover took 10 to 15 years for fast-growing corals and longer for massive "
            "corals. The median interval between severe bleaching events fell from 25 years in the early 1980s to 6 years "
            "after 2010. At current intervals, most reefs will shift toward fewer, slower-growing, more heat-tolerant corals.",
        ),
    ),
    Paper(
        "LRVS9SED", "Larval Seeding for Reef Restoration: A Five-Year Field Trial",
        (("Emma", "Kristiansen"), ("Joseph", "Baptiste")), "2023", "Restoration Ecology Reports",
        "Coral larvae collected during mass spawning and released onto degraded reef patches settled at densities "
        "100 times higher than on control patches. After five years, seeded patches had reproducing colonies, but "
        "restoration covered hectares while bleaching affects thousands of square kilometres.",
        (REEF,), ("restoration",),
        pages=(
            "1 Introduction\nRestoration cannot replace emission cuts, but it may help reefs recover between heatwaves. "
            "Larval seeding uses the billions of larvae released during mass spawning.",
            "2 Methods\nWe collected spawn slicks, reared larvae in floating pools for five days, and released them under "
            "mesh tents on twelve degraded reef patches of 100 square metres; twelve patches served as controls.",
            "3 Results\nSettlement on seeded patches was 100 times higher than on controls. After five years, 40% of seeded "
            "patches had colonies large enough to spawn themselves. The limit is scale: the whole trial restored less than "
            "one hectare, while a single heatwave bleaches thousands of square kilometres.",
        ),
    ),
    Paper(
        "HERB5FSH", "Herbivorous Fish Protect Reefs from Algal Overgrowth after Bleaching",
        (("Carlos", "Mendoza"), ("Fiona", "Gallagher")), "2020", "Reef Fish Ecology",
        "Where parrotfish and surgeonfish were abundant, bleached reefs stayed free of seaweed and young corals "
        "settled; where they were overfished, algae covered the dead coral and recovery stalled.",
        (REEF,), ("herbivores", "recovery"),
    ),
    Paper(
        "ASEV3BRD", "Assisted Evolution of Corals: Selective Breeding for Thermal Tolerance",
        (("Julia", "Steiner"), ("Ravi", "Kapoor")), "2021", "Conservation Genetics of Marine Species",
        "Crossing corals from warm northern reefs with colonies from cooler southern reefs produced offspring that "
        "survived heat stress up to ten times better than pure southern offspring. Heat tolerance is heritable.",
        (REEF,), ("adaptation", "breeding"),
    ),
    Paper(
        "TRBD6RFG", "Turbid Reefs as Thermal Refugia",
        (("Maya", "Goldberg"), ("Abdul", "Karim")), "2019", "Coastal Reef Science",
        "Inshore reefs in turbid water bleached less than clear-water reefs during the same heatwave, because "
        "suspended sediment shades corals from the light that, combined with heat, damages their symbionts.",
        (REEF,), ("refugia",),
    ),
    Paper(
        "CTZN2CLR", "Citizen Science Monitoring of Bleaching with Standardised Colour Charts",
        (("Laura", "Jensen"), ("Kwame", "Asante")), "2016", "Ocean Observing Methods",
        "Divers scoring coral colour against a printed chart produced bleaching estimates that agreed with expert "
        "surveys within 8%, making broad monitoring possible at low cost.",
        (REEF,), ("monitoring", "citizen science"),
    ),
)

# A standalone note, filed in a collection (as Zotero users keep project notes).
STANDALONE_NOTES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("NQST4RAG", "Questions for the reading group\n\nDoes dense retrieval still need BM25 as a fallback? "
                 "How should we evaluate citations in generated answers?", (RAG,)),
)
